// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {ITaskMarket} from "../interfaces/ITaskMarket.sol";
import {Draws} from "./Draws.sol";
import {Ids} from "./Ids.sol";

/// @title Votes
/// @notice An assigned validator's attestation on a sampled submission: its window, its positions, and the outcome a
///         strict majority of invalid votes makes. An external library run in the market's storage by delegate call
///         (its events are the market's), so that the market keeps room under EIP-170 for what votes grow into.
library Votes {
    /// @notice Records `valid` for every position of the submission's check the caller's seat holds
    ///         ({ITaskMarket-attest}); `seat` is the caller's.
    function attest(
        ITaskMarket.Task storage task,
        ITaskMarket.Round storage rd,
        ITaskMarket.Submission storage sub,
        ITaskMarket.Seat storage seat,
        uint256 submissionId,
        bool valid,
        string calldata evidenceCid
    ) external {
        uint256 bits = _positions(task, rd, seat, submissionId);
        if (sub.votedMask & bits != 0) revert ITaskMarket.MarketAlreadyVoted(submissionId, msg.sender);
        sub.votedMask |= uint16(bits);
        // One vote per position held: fees, slashes and the majority all count positions.
        uint256 held = Draws.popcount(bits);
        seat.pendingVotes += uint24(held);
        rd.attestCount += uint32(held);
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

    /// @dev The bits of the submission's check positions `seat` holds, refused outside the validate window, before the
    ///      check seed, for an unsampled submission, for a benched seat, and for a seat that holds none.
    function _positions(
        ITaskMarket.Task storage task,
        ITaskMarket.Round storage rd,
        ITaskMarket.Seat storage seat,
        uint256 submissionId
    ) private view returns (uint256 bits) {
        (uint256 taskId, uint256 round) = Ids.taskAndRound(submissionId);
        // slither-disable-next-line unused-return
        (uint256 submitDeadline, uint256 validateDeadline,) =
            Ids.deadlines(rd.openedAt, task.submitWindow, task.validateWindow, task.challengeWindow);
        Ids.within(submitDeadline, validateDeadline);
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
}
