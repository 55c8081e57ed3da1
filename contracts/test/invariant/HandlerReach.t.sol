// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {Test} from "../utils/Test.sol";
import {Handler} from "./Handler.sol";

/// @dev The handler reaches every stage: a fixed sequence of its actions ends with settled
///      rounds, a slashed cheat, paid credits and a refund. Without this an invariant run could
///      pass by never getting past the first window.
contract HandlerReachTest is Test {
    function test_HandlerReachesSettlement() public {
        Handler handler = new Handler(5, 0);
        handler.submit(0, 100, false, false);
        handler.submit(1, 100, false, false);
        handler.submit(2, 100, true, false);
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

    /// The reveal reaches a settled canary: revealed in the challenge window's first half, settled on the canary's
    /// terms (the invariants' counts stay zero), and a settled round.
    function test_HandlerReachesACanary() public {
        Handler handler = new Handler(5, 0);
        handler.submit(0, 100, false, false);
        handler.submit(1, 100, false, false);
        handler.submit(2, 100, true, true);
        handler.warp(0, true);
        handler.warp(0, true);
        handler.revealCanary(2);
        assertEq(handler.ghost_canariesRevealed(), 1, "revealed");
        handler.warp(0, true);
        handler.finalise();
        for (uint256 i = 0; i < 3; ++i) {
            handler.settle(0);
        }
        assertEq(handler.ghost_settles(), 3, "all three settled");
        assertEq(handler.ghost_canaryOwnersCharged(), 0, "the owner untouched");
        assertEq(handler.ghost_canaryValidVotesUnslashed(), 0, "valid votes slashed");
    }

    /// The leave action reaches both paths: refused while a vote is unsettled, allowed once settled.
    function test_HandlerReachesLeaving() public {
        Handler handler = new Handler(5, 0);
        handler.submit(0, 100, false, false);
        handler.submit(1, 100, false, false);
        handler.submit(2, 100, true, false);
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

    /// The pipelined handler opens rounds ahead, takes stale submissions and settles rounds in order.
    function test_PipelinedHandlerReachesStaleWork() public {
        Handler handler = new Handler(5, 1);
        handler.submit(0, 100, false, false);
        handler.warp(0, true); // round 0's submission deadline
        handler.openAhead();
        assertEq(handler.ghost_openedAhead(), 1, "round 1 opened ahead");
        handler.openAhead(); // round 2 would be two rounds ahead: refused
        assertEq(handler.ghost_openedAhead(), 1, "round 2 waits for round 0");
        // Round 1 on round 0's checkpoint (the seed's bits pick round 1 and the newest agreed base).
        handler.submit(1 | (1 << 8), 100, false, false);
        assertEq(handler.ghost_staleSubmissions(), 1, "a submission one round stale");
        for (uint256 i = 0; i < 4; ++i) {
            handler.warp(0, true);
        }
        handler.finalise();
        assertTrue(handler.market().getRound(handler.taskId(), 0).finalised, "round 0 final");
        assertTrue(handler.market().getRound(handler.taskId(), 1).checkpoint != 0, "round 1 got its checkpoint");
        for (uint256 i = 0; i < 2; ++i) {
            handler.settle(i);
        }
        assertEq(handler.ghost_settles(), 1, "round 0 settled; round 1 not final yet");
    }

    /// The copier reaches its attempt: in the reveal phase, with the honest validators' verdicts showing, it tries to
    /// commit what it sees and is refused (the commit phase is over); nothing showed before the reveal phase.
    function test_HandlerReachesACopier() public {
        Handler handler = new Handler(5, 0);
        handler.submit(0, 100, false, false);
        handler.submit(1, 100, true, false);
        handler.warp(0, true); // the submission deadline
        handler.warp(80, false); // into the reveal phase (the validate window's last quarter): the honest revealed
        for (uint256 i = 0; i < 8; ++i) {
            handler.copyVotes(i, i / 2, false);
        }
        assertTrue(handler.ghost_copyAttempts() > 0, "the copier tried");
        assertEq(handler.ghost_copiedCommitments(), 0, "and was refused");
        assertEq(handler.ghost_verdictsBeforeReveal(), 0, "nothing showed early");
    }
}
