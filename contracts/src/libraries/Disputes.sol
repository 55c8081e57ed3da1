// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {IERC20} from "@openzeppelin/contracts/token/ERC20/IERC20.sol";
import {ITaskMarket} from "../interfaces/ITaskMarket.sol";
import {Draws} from "./Draws.sol";
import {Ids} from "./Ids.sol";
import {Payouts} from "./Payouts.sol";
import {Pull} from "./Pull.sol";
import {Seats} from "./Seats.sol";
import {Seeds} from "./Seeds.sol";
import {Votes} from "./Votes.sol";

/// @title Disputes
/// @notice A dispute's state transitions — filed, seeded, voted, resolved — and its bond. An external library:
///         its functions run in the market's storage by delegate call (so its events are the market's), linked
///         at deployment; the market's entry points only name the storage each one touches.
/// @dev The committee is `validatorsPerCheck` positions drawn over the round's whole seat stake from the
///      prevrandao of a block named when the dispute was filed ({Seeds}); a verdict needs more than half of
///      all those positions, voted. A side holding a share `c` of the stake therefore overturns with chance at
///      most `P(Binomial(k, c) > k/2)` however it splits its stake, and the bond — lost unless upheld — is
///      priced against that chance at creation ({Params-leastDisputeBond}).
library Disputes {
    /// @notice Files a dispute on `submissionId` ({ITaskMarket-dispute}); the bond is pulled from the caller.
    function file(
        ITaskMarket.Task storage task,
        ITaskMarket.Round storage rd,
        ITaskMarket.Submission storage sub,
        ITaskMarket.Dispute storage d,
        ITaskMarket.Seat storage seat,
        IERC20 token,
        uint256 submissionId,
        bool claimValid
    ) external {
        // The outcome disputed is the one the caller saw: a vote or a reveal since would turn its claim around.
        if (claimValid != sub.rejected) revert ITaskMarket.MarketOutcomeChanged(submissionId, sub.rejected);
        // A dispute is filed between the validate and challenge deadlines; the submit deadline is not needed.
        // slither-disable-next-line unused-return
        (, uint256 validateDeadline, uint256 challengeDeadline) =
            Ids.deadlines(rd.openedAt, task.submitWindow, task.validateWindow, task.challengeWindow);
        Ids.within(validateDeadline, challengeDeadline);
        if (sub.disputed) revert ITaskMarket.MarketAlreadyDisputed(submissionId);
        // Against a rejection only the trainer speaks; against an acceptance, or a revealed canary (whose owner
        // said it is bad), anyone but the trainer.
        // slither-disable-next-line unused-return
        (,, address trainer) = Ids.decode(submissionId);
        if ((sub.rejected && !sub.canary) != (msg.sender == trainer)) {
            revert ITaskMarket.MarketDisputeSide(submissionId, msg.sender);
        }
        // A round whose check never started was finalised (or will be) unverified: nothing in it is paid or
        // slashed, and no committee was ever drawn for it to appeal to.
        if (rd.checkSeed == 0) revert ITaskMarket.MarketNoCommittee(submissionId);
        // A checker may not dispute the acceptance its own "valid" made (it may appeal a revealed canary it
        // voted valid).
        if (!sub.rejected && _votedValid(task, rd, sub, seat, submissionId)) {
            revert ITaskMarket.MarketDisputeSide(submissionId, msg.sender);
        }
        sub.disputed = true;
        uint96 bond = task.disputeBond;
        d.disputer = msg.sender;
        d.bond = bond;
        d.seedBlock = uint64(block.number + Seeds.DELAY);
        d.deadline = uint64(block.timestamp + task.challengeWindow);
        d.claimValid = sub.rejected;
        d.open = true;
        rd.openDisputes += 1;
        emit ITaskMarket.Disputed(submissionId, msg.sender, d.claimValid, bond, d.deadline);
        Pull.fromSender(token, bond);
    }

    /// @dev Whether `seat` (the caller's) voted "valid" on a position of the submission's check. Such a checker may
    ///      not dispute the acceptance its own vote made: a lazy vote would front-run the reveal of the canary it
    ///      waved through, block it, and take a finder's share. A non-member's seat holds no position, and an
    ///      unsampled submission has no votes.
    function _votedValid(
        ITaskMarket.Task storage task,
        ITaskMarket.Round storage rd,
        ITaskMarket.Submission storage sub,
        ITaskMarket.Seat storage seat,
        uint256 submissionId
    ) private view returns (bool) {
        return Votes.checkerBits(task, rd, seat, submissionId) & sub.votedMask & ~uint256(sub.invalidMask) != 0;
    }

    /// @notice Fixes the committee's seed from its seed block's header, or moves a seed block whose hash is gone
    ///         ({ITaskMarket-fixDisputeSeed}). Fixing twice changes nothing.
    function fixSeed(ITaskMarket.Dispute storage d, uint256 submissionId, bytes calldata header) external {
        if (!d.open) revert ITaskMarket.MarketDisputeNotOpen(submissionId);
        if (d.seed != 0) return;
        uint256 at = d.seedBlock;
        if (block.number <= at) revert ITaskMarket.MarketNoCommittee(submissionId);
        if (blockhash(at) == 0) {
            // Gone past 256 blocks: a block still to come takes its place, as unknown to this caller.
            at = block.number + Seeds.DELAY;
            d.seedBlock = uint64(at);
            emit ITaskMarket.DisputeBlockMoved(submissionId, at);
            return;
        }
        (uint256 number, bytes32 mix) = Seeds.read(header);
        if (number != at) revert ITaskMarket.MarketWrongHeader(number);
        bytes32 seed = Draws.disputeSeedFrom(mix, submissionId);
        d.seed = seed;
        emit ITaskMarket.DisputeSeedFixed(submissionId, seed);
    }

    /// @notice A committee member's hidden vote ({ITaskMarket-commitDisputeVote}): for every position its seat holds.
    function commitVote(
        ITaskMarket.Task storage task,
        ITaskMarket.Round storage rd,
        ITaskMarket.Dispute storage d,
        ITaskMarket.Seat storage seat,
        mapping(address => bytes32) storage commitments,
        uint256 submissionId,
        bytes32 commitment
    ) external {
        if (!d.open) {
            revert ITaskMarket.MarketDisputeNotOpen(submissionId);
        }
        Ids.within(0, _revealFrom(task, d));
        if (d.seed == 0) revert ITaskMarket.MarketNoCommittee(submissionId);
        if (seat.benched) revert ITaskMarket.MarketValidatorBenched(Ids.taskOf(submissionId), msg.sender);
        uint256 bits =
            Draws.bitsWithin(Draws.committee(d.seed, rd.seatStake, task.validatorsPerCheck), seat.from, seat.stake);
        // Position bits, not a balance: zero means "holds no position" and nothing else.
        // slither-disable-next-line incorrect-equality
        if (bits == 0) revert ITaskMarket.MarketNotAssigned(submissionId, msg.sender);
        if (d.committedMask & bits != 0) revert ITaskMarket.MarketAlreadyVoted(submissionId, msg.sender);
        d.committedMask |= uint16(bits);
        Votes.store(commitments, commitment, bits);
        emit ITaskMarket.DisputeVoteCommitted(submissionId, msg.sender, commitment);
    }

    /// @notice Opens a committee member's commitment and counts its vote ({ITaskMarket-voteDispute}): in the
    ///         dispute's reveal phase, to its deadline.
    function vote(
        ITaskMarket.Task storage task,
        ITaskMarket.Dispute storage d,
        mapping(address => bytes32) storage commitments,
        uint256 submissionId,
        bool valid,
        string calldata evidenceCid,
        bytes32 salt
    ) external {
        if (!d.open) revert ITaskMarket.MarketDisputeNotOpen(submissionId);
        Ids.within(_revealFrom(task, d), d.deadline);
        uint256 bits = Votes.open(commitments, submissionId, valid, evidenceCid, salt);
        d.votedMask |= uint16(bits);
        if (valid) d.validMask |= uint16(bits);
        emit ITaskMarket.DisputeVoted(submissionId, msg.sender, valid, evidenceCid);
    }

    /// @dev Where a dispute's reveal phase starts: the last quarter of its voting time (a challenge window).
    function _revealFrom(ITaskMarket.Task storage task, ITaskMarket.Dispute storage d) private view returns (uint256) {
        return d.deadline - task.challengeWindow / Ids.REVEAL_SHARE;
    }

    /// @notice Resolves a dispute once more than half of its committee's positions agree, or at its deadline
    ///         ({ITaskMarket-resolveDispute}). Upheld, it flips the submission's outcome and returns the bond;
    ///         otherwise the outcome stands and the bond pays the positions that voted for it (the task's pool
    ///         when none did): a dispute nobody upholds is never free.
    function resolve(
        ITaskMarket.Task storage task,
        ITaskMarket.Round storage rd,
        ITaskMarket.Submission storage sub,
        ITaskMarket.Dispute storage d,
        ITaskMarket.Member[] storage members,
        Payouts.Ledger storage ledger,
        uint256 submissionId
    ) external {
        if (!d.open) revert ITaskMarket.MarketDisputeNotOpen(submissionId);
        uint256 size = task.validatorsPerCheck;
        uint256 againstMask = d.claimValid ? d.votedMask & ~d.validMask : d.validMask;
        bool upheld = 2 * Draws.popcount(d.votedMask & ~againstMask) > size;
        if (!upheld && 2 * Draws.popcount(againstMask) <= size && block.timestamp < d.deadline) {
            revert ITaskMarket.MarketDisputeVotingOpen(submissionId, d.deadline);
        }
        d.open = false;
        d.upheld = upheld;
        emit ITaskMarket.DisputeResolved(submissionId, upheld, _close(rd, sub, upheld));
        if (upheld) {
            Payouts.credit(ledger, Ids.taskOf(submissionId), d.disputer, d.bond, ITaskMarket.CreditKind.BondReturned);
        } else {
            task.pool += uint96(d.bond - _payStanding(d, rd, members, ledger, submissionId, size, againstMask));
        }
    }

    /// @dev Closes the round's dispute and, when upheld, flips the submission's outcome. Returns whether the
    ///      submission ends up rejected.
    function _close(ITaskMarket.Round storage rd, ITaskMarket.Submission storage sub, bool upheld)
        private
        returns (bool rejected)
    {
        rd.openDisputes -= 1;
        rejected = sub.rejected;
        if (!upheld) return rejected;
        rejected = !rejected;
        sub.rejected = rejected;
        // A revealed canary's units share the trainer budget either way (as its prize, or overturned, its pay).
        if (!sub.canary) {
            if (rejected) rd.includedUnits -= sub.workUnits;
            else rd.includedUnits += sub.workUnits;
        }
        // The included set changed: proposals for the old aggregate no longer count.
        rd.checkpointEpoch += 1;
        rd.agreedNext = 0;
    }

    /// @dev A bond not upheld pays the committee positions that voted for the standing outcome; returns what
    ///      was paid (zero when none did, or no committee was drawn).
    function _payStanding(
        ITaskMarket.Dispute storage d,
        ITaskMarket.Round storage rd,
        ITaskMarket.Member[] storage members,
        Payouts.Ledger storage ledger,
        uint256 submissionId,
        uint256 size,
        uint256 standingMask
    ) private returns (uint256) {
        if (d.seed == 0) return 0;
        address[] memory committee = Seats.holders(members, Draws.committee(d.seed, rd.seatStake, size));
        return Payouts.splitAmong(
            ledger,
            Ids.taskOf(submissionId),
            committee,
            standingMask,
            d.bond,
            ITaskMarket.CreditKind.CommitteeShare,
            address(0)
        );
    }
}
