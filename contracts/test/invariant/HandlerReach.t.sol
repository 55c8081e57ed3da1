// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {Test} from "../utils/Test.sol";
import {Handler} from "./Handler.sol";

/// @dev The handler reaches every stage: a fixed sequence of its actions ends with settled
///      rounds, a slashed cheat, paid credits and a refund. Without this an invariant run could
///      pass by never getting past the first window.
contract HandlerReachTest is Test {
    function test_HandlerReachesSettlement() public {
        Handler handler = new Handler(5);
        handler.submit(0, 100, false);
        handler.submit(1, 100, false);
        handler.submit(2, 100, true);
        assertEq(handler.submissionCount(), 3, "submitted");
        handler.warp(0, true);
        handler.warp(0, true);
        handler.warp(0, true);
        handler.finalise();
        for (uint256 i = 0; i < 3; ++i) {
            handler.settle(0);
        }
        assertEq(handler.ghost_settles(), 3, "all three settled");
        assertTrue(handler.market().totalCredits() > 0, "credits paid");
        for (uint256 i = 0; i < 9; ++i) {
            handler.claim(i);
        }
        assertEq(handler.market().totalCredits(), 0, "all claimed");
    }

    /// The leave action reaches both paths: refused while a vote is unsettled, allowed once settled.
    function test_HandlerReachesLeaving() public {
        Handler handler = new Handler(5);
        handler.submit(0, 100, false);
        handler.submit(1, 100, false);
        handler.submit(2, 100, true);
        for (uint256 round = 0; round < 3; ++round) {
            handler.warp(0, true);
            handler.warp(0, true);
            handler.warp(0, true);
            handler.finalise();
        }
        assertTrue(handler.market().getTask(handler.taskId()).ended, "ended");
        for (uint256 i = 0; i < 5; ++i) {
            handler.leave(i);
        }
        uint256 early = handler.ghost_leaves();
        assertTrue(early < 5, "a voter was kept until its votes are settled");
        for (uint256 i = 0; i < 3; ++i) {
            handler.settle(0);
        }
        for (uint256 i = 0; i < 5; ++i) {
            handler.leave(i);
        }
        assertEq(handler.ghost_leaves(), 5, "everyone left once settled");
        assertEq(handler.ghost_leftWithVotesUnsettled(), 0, "nobody left early");
    }
}

