// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {ITaskMarket} from "../interfaces/ITaskMarket.sol";

/// @title Seats
/// @notice Who holds a drawn position, and a validator leaving: what reads the task's members from the
///         market's storage. An external library (its functions run in the market's storage
///         by delegate call and are linked at deployment), which keeps the market under the 24 KiB
///         contract limit. Twin of `holders` in `protocol/chain/assignment.py`.
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
