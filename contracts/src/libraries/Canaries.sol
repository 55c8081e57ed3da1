// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {ITaskMarket} from "../interfaces/ITaskMarket.sol";
import {Ids} from "./Ids.sol";

/// @title Canaries
/// @notice Revealing a canary: known-bad work a task's creator planted through an ordinary trainer address, with a
///         tag only its salt opens. An external library run in the market's storage by delegate call (its events
///         are the market's); settlement of a revealed canary is the market's ({ITaskMarket-settle}).
/// @dev Until the reveal, a canary is work like any other to everyone but its creator: an address with stake, a
///      submission in the window, a tag of 32 random-looking bytes, content made by the same node software.
///      The reveal comes after the votes (from the validate deadline) and early enough in the challenge window
///      (its first half) that a validator who thinks the canary real work can still dispute it.
library Canaries {
    uint256 internal constant PPM = 1_000_000;

    /// @notice Reveals `submissionId` as a canary ({ITaskMarket-revealCanary}).
    function reveal(
        ITaskMarket.Task storage task,
        ITaskMarket.Round storage rd,
        ITaskMarket.Submission storage sub,
        uint256 submissionId,
        bytes32 salt
    ) external {
        (uint256 taskId, uint256 round) = Ids.taskAndRound(submissionId);
        uint256 rate = task.canaryRatePpm;
        if (rate == 0) revert ITaskMarket.MarketNoCanaries(taskId);
        if (msg.sender != task.creator) revert ITaskMarket.MarketNotCreator(taskId, msg.sender);
        // slither-disable-next-line unused-return
        (, uint256 validateDeadline,) =
            Ids.deadlines(rd.openedAt, task.submitWindow, task.validateWindow, task.challengeWindow);
        Ids.within(validateDeadline, validateDeadline + task.challengeWindow / 2);
        // A disputed submission's outcome is the committee's to decide, whatever its tag.
        if (sub.canary || sub.disputed || sub.tag != Ids.canaryTag(salt, submissionId)) {
            revert ITaskMarket.MarketNotCanary(submissionId);
        }
        // The rate rounds down: a round reveals at most floor(rate * submissions) canaries, so a task at one
        // part per million reveals none of a small round's work.
        uint256 canaries = rd.canaries;
        if ((canaries + 1) * PPM > rate * rd.submissionCount || canaries == type(uint8).max) {
            revert ITaskMarket.MarketCanaryRate(taskId, round, canaries);
        }
        rd.canaries = uint8(canaries + 1);
        sub.canary = true;
        // Its units share the trainer budget (their share is its catchers' prize); it leaves the aggregate.
        if (sub.rejected) {
            rd.includedUnits += sub.workUnits;
        } else {
            sub.rejected = true;
            // The included set changed: proposals for the old aggregate no longer count.
            rd.checkpointEpoch += 1;
            rd.agreedNext = 0;
            emit ITaskMarket.SubmissionRejected(submissionId);
        }
        emit ITaskMarket.CanaryRevealed(submissionId, salt);
    }
}
