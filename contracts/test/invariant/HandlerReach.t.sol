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
}

