// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {BaseTest} from "./BaseTest.sol";
import {ITaskMarket} from "../src/interfaces/ITaskMarket.sol";

/// @dev Randomness nobody steers (issue 17, item 3): the check seed comes from a block chosen before
///      it exists, whoever sends the transaction and whenever; a dispute committee likewise. Default
///      task: p = 1/2, 3 of 5 validators per check.
contract CheckSeedTest is BaseTest {
    uint256 internal taskId;
    uint256 internal id;

    function setUp() public override {
        super.setUp();
        ITaskMarket.TaskParams memory p = _params();
        p.sampleRatePpm = 500_000;
        p.colludingSharePpm = 0; // deters at S = R; these tests are about the seed
        p.slashAmount = uint96(450 * TOKEN);
        p.minTrainerStake = p.slashAmount;
        taskId = _readyTask(p);
        id = _submit(taskId, 0, trainers[0], 100);
        (uint256 submitDeadline,,) = lens.deadlinesOf(taskId, 0);
        vm.warp(submitDeadline);
        vm.roll(block.number + 1);
    }

    /// Before: the seed hashed the block of whichever transaction fixed it first, so a trainer sent
    /// `fixCheckSeed` only in a block where its own submission was not sampled (at p = 1/2 it escaped
    /// on its first try). Now the first call only names a block two ahead; whoever fixes the seed after
    /// that block, and whenever, gets the same seed. Shown failing on the contract before: the two
    /// fixes below, in different blocks by different callers, gave different seeds.
    function test_TheSeedIsTheSameWhoeverFixesItAndWhenever() public {
        uint256 requestedAt = block.number;
        vm.prank(trainers[0]);
        market.fixCheckSeed(taskId);
        ITaskMarket.Round memory rd = market.getRound(taskId, 0);
        assertEq(rd.seedBlock, requestedAt + 2, "a block still to come");
        assertEq(rd.checkSeed, bytes32(0), "not fixed by the request");
        // Nothing can use the seed before its block exists.
        vm.roll(requestedAt + 2);
        vm.prank(validators[0]);
        vm.expectRevert(abi.encodeWithSelector(ITaskMarket.MarketCheckSeedPending.selector, taskId, 0, requestedAt + 2));
        market.attest(id, true, "e");

        vm.roll(requestedAt + 3);
        uint256 snapshot = vm.snapshotState();
        vm.prank(trainers[0]);
        market.fixCheckSeed(taskId);
        bytes32 byTrainer = market.getRound(taskId, 0).checkSeed;
        vm.revertToState(snapshot);
        vm.roll(requestedAt + 40);
        vm.prank(auditor);
        market.fixCheckSeed(taskId);
        bytes32 byAuditorLater = market.getRound(taskId, 0).checkSeed;
        assertEq(byTrainer, byAuditorLater, "the same seed whoever fixes it, whenever");
        assertEq(byTrainer, keccak256(abi.encode(blockhash(requestedAt + 2), taskId, 0, "check")), "the block's hash");
    }

    /// The validator count is taken at the request, before the seed is known: a validator who joins
    /// once the seed block's hash is public cannot move anyone's draw.
    function test_TheValidatorCountIsTakenAtTheRequest() public {
        market.fixCheckSeed(taskId);
        uint32 counted = market.getRound(taskId, 0).validatorCount;
        vm.roll(block.number + 3);
        _joinAsNewValidator(_actor("late validator", 99), taskId, 200 * TOKEN, 100 * TOKEN);
        market.fixCheckSeed(taskId);
        assertEq(market.getRound(taskId, 0).validatorCount, counted, "the count of the request");
    }

    /// Past 256 blocks the requested block's hash is gone: nothing is fixed from some later block a
    /// caller picks; `fixCheckSeed` names a new block still to come instead.
    function test_PastTheHorizonANewBlockIsRequested() public {
        market.fixCheckSeed(taskId);
        uint256 first = market.getRound(taskId, 0).seedBlock;
        vm.roll(first + 300);
        vm.prank(validators[0]);
        vm.expectRevert(abi.encodeWithSelector(ITaskMarket.MarketCheckSeedPending.selector, taskId, 0, first));
        market.attest(id, true, "e");
        market.fixCheckSeed(taskId);
        uint256 second = market.getRound(taskId, 0).seedBlock;
        assertEq(second, first + 302, "a new block two ahead");
        vm.roll(second + 1);
        market.fixCheckSeed(taskId);
        assertEq(
            market.getRound(taskId, 0).checkSeed,
            keccak256(abi.encode(blockhash(second), taskId, 0, "check")),
            "fixed from the new block"
        );
    }

    /// A round nobody submitted to finalises in one call, with no seed (nothing to draw for).
    function test_AnEmptyRoundFinalisesWithoutASeed() public {
        uint256 empty = _createTask(_params());
        _warpToFinal(empty, 0);
        market.finaliseRound(empty);
        assertTrue(market.getRound(empty, 0).finalised, "finalised");
        assertEq(market.getRound(empty, 0).checkSeed, bytes32(0), "no seed needed");
    }

    /// A dispute's committee comes from the hash of the block that included it. Before: past 256 blocks
    /// without a vote it came from the block before the first vote, so that voter chose its committee
    /// by choosing when to vote. Now that vote only moves the dispute's block to its own (whose hash it
    /// cannot know) and votes nothing; the committee follows from that block. Shown failing on the
    /// contract before: the first vote below was counted from a committee of the voter's block.
    function test_ALostDisputeBlockIsReplacedNotChosen() public {
        market.fixCheckSeed(taskId);
        vm.roll(block.number + 3);
        market.fixCheckSeed(taskId);
        _warpToChallenge(taskId, 0);
        vm.prank(auditor);
        market.dispute(id);
        uint256 filed = market.getDispute(id).filedBlock;
        vm.roll(filed + 300);
        assertEq(lens.disputeCommittee(id).length, 0, "no committee while the block's hash is gone");
        vm.prank(validators[0]);
        vm.expectEmit();
        emit ITaskMarket.DisputeBlockMoved(id, filed + 300);
        market.voteDispute(id, true, "e");
        ITaskMarket.Dispute memory d = market.getDispute(id);
        assertEq(d.votedMask, 0, "nothing voted");
        assertEq(d.filedBlock, filed + 300, "the block moved to the call's own");
        vm.roll(filed + 301);
        address[] memory committee = lens.disputeCommittee(id);
        assertTrue(committee.length > 0, "a committee from the new block");
        vm.prank(committee[0]);
        market.voteDispute(id, true, "e");
        assertTrue(market.getDispute(id).votedMask != 0, "and its votes count");
    }
}
