// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {ITaskMarket} from "../interfaces/ITaskMarket.sol";
import {Draws} from "./Draws.sol";

/// @title Seats
/// @notice Who holds a drawn position, and a dispute's committee: the draws that read the task's members
///         from the market's storage. An external library (its functions run in the market's storage
///         by delegate call and are linked at deployment), which keeps the market under the 24 KiB
///         contract limit. Twin of `holders` and `committee_positions` in `protocol/chain/assignment.py`.
library Seats {
    /// @notice The caller leaves an ended task ({ITaskMarket-leaveTask}): refused before the end, when it did
    ///         not join, or while a vote it cast is unsettled (the stake stays answerable until it is). Its
    ///         range stays where it was (no one else's positions move), holding nothing from now on. Returns
    ///         the stake to unlock. Here rather than in the market to keep it under the 24 KiB limit.
    function leave(ITaskMarket.Task storage task, ITaskMarket.Seat storage seat, uint256 taskId)
        external
        returns (uint256 stake)
    {
        if (!task.ended) revert ITaskMarket.MarketTaskNotEnded(taskId);
        if (seat.slot == 0) revert ITaskMarket.MarketNotJoined(taskId, msg.sender);
        // A vote not settled yet is still answerable: the stake stays until it is.
        if (seat.pendingVotes != 0) revert ITaskMarket.MarketVotesUnsettled(taskId, msg.sender, seat.pendingVotes);
        stake = seat.stake;
        seat.slot = 0;
        seat.stake = 0;
        emit ITaskMarket.ValidatorLeft(taskId, msg.sender);
    }

    /// @dev What a dispute committee's draw depends on.
    struct CommitteeDraw {
        bytes32 checkSeed;
        bytes32 disputeSeed;
        uint256 submissionId;
        uint256 seatStake;
        uint256 validatorCount;
        uint256 perCheck;
        uint256 sampleRatePpm;
    }

    /// @notice The validator holding each drawn position: the last member whose range starts at or below
    ///         it, found by binary search (`log2(members)` storage reads each). Draws only use ranges that
    ///         existed at the round's snapshot, and ranges never move.
    function holders(ITaskMarket.Member[] storage members, uint256[] memory drawn)
        public
        view
        returns (address[] memory accounts)
    {
        accounts = new address[](drawn.length);
        for (uint256 j = 0; j < drawn.length; ++j) {
            accounts[j] = members[_holderIndex(members, drawn[j])].account;
        }
    }

    /// @notice A dispute committee's positions — a fresh draw over the round's seat stake outside the
    ///         ranges of the validators assigned to the submission, who do not judge their own votes — and
    ///         the seat stake it is drawn from (zero: nobody is left to judge; no positions then).
    function committee(ITaskMarket.Member[] storage members, CommitteeDraw memory d)
        public
        view
        returns (uint256[] memory drawn, uint256 outside)
    {
        (uint256[] memory starts, uint256[] memory ends) = _assignedRanges(members, d);
        outside = d.seatStake;
        for (uint256 i = 0; i < starts.length; ++i) {
            outside -= ends[i] - starts[i];
        }
        if (outside == 0) return (drawn, 0);
        drawn = Draws.positionsOutside(d.disputeSeed, d.seatStake, d.perCheck, starts, ends);
    }

    /// @dev The seat ranges of the validators holding a submission's assigned positions, sorted, each once
    ///      (none when it was not sampled).
    function _assignedRanges(ITaskMarket.Member[] storage members, CommitteeDraw memory d)
        private
        view
        returns (uint256[] memory starts, uint256[] memory ends)
    {
        if (!Draws.isSampled(d.checkSeed, d.submissionId, d.sampleRatePpm)) return (starts, ends);
        uint256[] memory drawn = Draws.assigned(d.checkSeed, d.submissionId, d.seatStake, d.perCheck);
        starts = new uint256[](drawn.length);
        ends = new uint256[](drawn.length);
        uint256 length = 0;
        for (uint256 j = 0; j < drawn.length; ++j) {
            uint256 i = _holderIndex(members, drawn[j]);
            // A range ends where the next member's starts, or at the round's snapshot of the seat stake.
            uint256 end = i + 1 < d.validatorCount ? members[i + 1].from : d.seatStake;
            length = Draws.insertRange(starts, ends, length, members[i].from, end);
        }
        // Shorten both arrays to the distinct ranges found.
        assembly ("memory-safe") {
            mstore(starts, length)
            mstore(ends, length)
        }
    }

    /// @dev The index of the member whose range holds `position`: the last one starting at or below it.
    function _holderIndex(ITaskMarket.Member[] storage members, uint256 position) private view returns (uint256 low) {
        uint256 high = members.length; // the answer is in [low, high)
        while (high - low > 1) {
            uint256 mid = (low + high) / 2;
            if (members[mid].from <= position) low = mid;
            else high = mid;
        }
    }
}
