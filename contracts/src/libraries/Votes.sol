// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {ITaskMarket} from "../interfaces/ITaskMarket.sol";
import {Draws} from "./Draws.sol";
import {Ids} from "./Ids.sol";

/// @title Votes
/// @notice An assigned validator's attestation on a sampled submission, in two steps: a commitment that hides its
///         verdict (the commit phase), then the verdict revealed (the reveal phase, the validate window's last
///         quarter), so a validator that waits for others' votes finds none to copy; its positions, and the outcome a
///         strict majority of invalid votes makes. An external library run in the market's storage by delegate call
///         (its events are the market's), so that the market keeps room under EIP-170 for what votes grow into.
library Votes {
    /// @notice Commits the caller's seat to a hidden verdict for every position of the submission's check it holds
    ///         ({ITaskMarket-commitAttestation}); `seat` is the caller's, `commitments` the submission's.
    function commit(
        ITaskMarket.Task storage task,
        ITaskMarket.Round storage rd,
        ITaskMarket.Submission storage sub,
        ITaskMarket.Seat storage seat,
        mapping(address => bytes32) storage commitments,
        uint256 submissionId,
        bytes32 commitment
    ) external {
        (uint256 submitDeadline, uint256 validateDeadline,) = _deadlines(task, rd);
        Ids.within(submitDeadline, Ids.revealFrom(validateDeadline, task.validateWindow));
        uint256 bits = _positions(task, rd, seat, submissionId);
        if (sub.committedMask & bits != 0) revert ITaskMarket.MarketAlreadyVoted(submissionId, msg.sender);
        sub.committedMask |= uint16(bits);
        // One vote per position held: fees, slashes and the majority all count positions. The seat answers for them
        // (it cannot leave) from here: a commitment never revealed is penalised when the submission settles.
        uint256 held = Draws.popcount(bits);
        seat.pendingVotes += uint24(held);
        rd.attestCount += uint32(held);
        store(commitments, commitment, bits);
        emit ITaskMarket.AttestationCommitted(submissionId, msg.sender, commitment);
    }

    /// @notice Opens the caller's commitment and counts its verdict for the positions it committed
    ///         ({ITaskMarket-attest}): in the reveal phase, to the validate deadline.
    function reveal(
        ITaskMarket.Task storage task,
        ITaskMarket.Round storage rd,
        ITaskMarket.Submission storage sub,
        mapping(address => bytes32) storage commitments,
        uint256 submissionId,
        bool valid,
        string calldata evidenceCid,
        bytes32 salt
    ) external {
        (, uint256 validateDeadline,) = _deadlines(task, rd);
        Ids.within(Ids.revealFrom(validateDeadline, task.validateWindow), validateDeadline);
        uint256 bits = open(commitments, submissionId, valid, evidenceCid, salt);
        sub.votedMask |= uint16(bits);
        emit ITaskMarket.Attested(submissionId, msg.sender, valid, evidenceCid);
        if (!valid) {
            sub.invalidMask |= uint16(bits);
            if (!sub.rejected && 2 * Draws.popcount(sub.invalidMask) > task.validatorsPerCheck) {
                sub.rejected = true;
                rd.includedUnits -= sub.workUnits;
                emit ITaskMarket.SubmissionRejected(submissionId);
            }
        }
    }

    /// @dev Stores the caller's `commitment` in `commitments` with the position `bits` it covers in its low 16 bits,
    ///      so that the reveal ({open}) need not draw them again.
    function store(mapping(address => bytes32) storage commitments, bytes32 commitment, uint256 bits) internal {
        commitments[msg.sender] = (commitment & ~bytes32(uint256(type(uint16).max))) | bytes32(bits);
    }

    /// @dev Opens the caller's commitment in `commitments` with its verdict, evidence CID and salt, clears it, and
    ///      returns the position bits it was stored with; refused when there is none or it does not open.
    function open(
        mapping(address => bytes32) storage commitments,
        uint256 submissionId,
        bool valid,
        string calldata evidenceCid,
        bytes32 salt
    ) internal returns (uint256 bits) {
        uint256 stored = uint256(commitments[msg.sender]);
        if (stored == 0) revert ITaskMarket.MarketNoCommitment(submissionId, msg.sender);
        uint256 opened = uint256(Ids.voteCommitment(submissionId, msg.sender, valid, evidenceCid, salt));
        if ((opened ^ stored) >> 16 != 0) revert ITaskMarket.MarketRevealMismatch(submissionId, msg.sender);
        delete commitments[msg.sender];
        bits = uint16(stored);
    }

    /// @dev The bits of the positions of the submission's check (drawn from the round's check seed) that `seat`
    ///      holds; zero for a seat that holds none, or a non-member's.
    function checkerBits(
        ITaskMarket.Task storage task,
        ITaskMarket.Round storage rd,
        ITaskMarket.Seat storage seat,
        uint256 submissionId
    ) internal view returns (uint256) {
        return Draws.bitsWithin(
            Draws.assigned(rd.checkSeed, submissionId, rd.seatStake, task.validatorsPerCheck), seat.from, seat.stake
        );
    }

    /// @dev The bits of the submission's check positions `seat` holds, refused before the check seed, for an unsampled
    ///      submission, for a benched seat, and for a seat that holds none.
    function _positions(
        ITaskMarket.Task storage task,
        ITaskMarket.Round storage rd,
        ITaskMarket.Seat storage seat,
        uint256 submissionId
    ) private view returns (uint256 bits) {
        (uint256 taskId, uint256 round) = Ids.taskAndRound(submissionId);
        bytes32 seed = rd.checkSeed;
        if (seed == 0) revert ITaskMarket.MarketCheckSeedPending(taskId, round, rd.seedBlock);
        if (!Draws.isSampled(seed, submissionId, task.sampleRatePpm)) {
            revert ITaskMarket.MarketNotSampled(submissionId);
        }
        if (seat.benched) revert ITaskMarket.MarketValidatorBenched(taskId, msg.sender);
        bits = checkerBits(task, rd, seat, submissionId);
        // Position bits, not a balance: zero means "holds no position" and nothing else.
        // slither-disable-next-line incorrect-equality
        if (bits == 0) revert ITaskMarket.MarketNotAssigned(submissionId, msg.sender);
    }

    function _deadlines(ITaskMarket.Task storage task, ITaskMarket.Round storage rd)
        private
        view
        returns (uint256 submitDeadline, uint256 validateDeadline, uint256 challengeDeadline)
    {
        return Ids.deadlines(rd.openedAt, task.submitWindow, task.validateWindow, task.challengeWindow);
    }
}
