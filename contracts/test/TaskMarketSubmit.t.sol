// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {BaseTest} from "./BaseTest.sol";
import {IStakeManager} from "../src/interfaces/IStakeManager.sol";
import {ITaskMarket} from "../src/interfaces/ITaskMarket.sol";
import {TaskMarket} from "../src/TaskMarket.sol";
import {TaskMarketLens} from "../src/TaskMarketLens.sol";

contract TaskMarketSubmitTest is BaseTest {
    uint256 internal taskId;

    function setUp() public override {
        super.setUp();
        taskId = _readyTask(_params());
    }

    function test_SubmitWork() public {
        uint256 id = _submit(taskId, 0, trainers[0], 1234);
        assertEq(id, lens.submissionIdOf(taskId, 0, trainers[0]), "id");
        assertEq(market.getSubmission(id).workUnits, 1234, "units");
        assertEq(stakes.accountOf(trainers[0]).locked, 500 * TOKEN, "stake locked");
        ITaskMarket.Round memory rd = market.getRound(taskId, 0);
        assertEq(rd.submissionCount, 1, "count");
        assertEq(rd.includedUnits, 1234, "units included until rejected");
    }

    function test_RevertWhen_SubmitTwice() public {
        uint256 id = _submit(taskId, 0, trainers[0], 1);
        vm.prank(trainers[0]);
        vm.expectRevert(abi.encodeWithSelector(ITaskMarket.MarketDuplicateSubmission.selector, id));
        market.submitWork(taskId, 0, 0, "r", "u", 1, 0, 0);
    }

    function test_RevertWhen_SubmitAfterDeadline() public {
        _warpToValidate(taskId, 0);
        vm.prank(trainers[0]);
        vm.expectRevert(
            abi.encodeWithSelector(ITaskMarket.MarketOutsideWindow.selector, block.timestamp, 1, block.timestamp)
        );
        market.submitWork(taskId, 0, 0, "r", "u", 1, 0, 0);
    }

    function test_RevertWhen_SubmitWrongRound() public {
        vm.prank(trainers[0]);
        vm.expectRevert(abi.encodeWithSelector(ITaskMarket.MarketWrongRound.selector, taskId, 1, 0));
        market.submitWork(taskId, 1, 1, "r", "u", 1, 0, 0);
    }

    function test_RevertWhen_SubmitBadUnitsOrCid() public {
        vm.startPrank(trainers[0]);
        vm.expectRevert(abi.encodeWithSelector(ITaskMarket.MarketWorkUnitsOutOfRange.selector, 0, 1_000_000));
        market.submitWork(taskId, 0, 0, "r", "u", 0, 0, 0);
        vm.expectRevert(abi.encodeWithSelector(ITaskMarket.MarketWorkUnitsOutOfRange.selector, 1_000_001, 1_000_000));
        market.submitWork(taskId, 0, 0, "r", "u", 1_000_001, 0, 0);
        vm.expectRevert(ITaskMarket.MarketEmptyCid.selector);
        market.submitWork(taskId, 0, 0, "", "u", 1, 0, 0);
        vm.stopPrank();
    }

    /// Safety property 5: a validator's (or anyone's) stake cannot back a trainer's submission.
    function test_RevertWhen_SubmitWithoutTrainerStake() public {
        vm.prank(validators[0]);
        vm.expectRevert(
            abi.encodeWithSelector(
                IStakeManager.StakeRoleMismatch.selector,
                validators[0],
                IStakeManager.Role.Validator,
                IStakeManager.Role.Trainer
            )
        );
        market.submitWork(taskId, 0, 0, "r", "u", 1, 0, 0);
        vm.prank(trainers[0]);
        stakes.requestUnstake(600 * TOKEN); // 400 left, 500 needed
        vm.prank(trainers[0]);
        vm.expectRevert(
            abi.encodeWithSelector(IStakeManager.StakeInsufficientFree.selector, trainers[0], 400 * TOKEN, 500 * TOKEN)
        );
        market.submitWork(taskId, 0, 0, "r", "u", 1, 0, 0);
    }

    /// Safety property 6: the commitment binds chain id, contract, task, round, base round and trainer.
    function test_CommitmentCannotBeReplayed() public {
        bytes32 proofs = keccak256("proofs");
        bytes32 base = lens.commitmentOf(taskId, 1, 1, trainers[0], proofs);
        assertTrue(
            base == keccak256(abi.encode(block.chainid, address(market), taskId, 1, 1, trainers[0], proofs)), "layout"
        );
        assertTrue(lens.commitmentOf(taskId, 0, 1, trainers[0], proofs) != base, "round");
        assertTrue(lens.commitmentOf(taskId, 1, 0, trainers[0], proofs) != base, "base round");
        assertTrue(lens.commitmentOf(taskId + 1, 1, 1, trainers[0], proofs) != base, "task");
        assertTrue(lens.commitmentOf(taskId, 1, 1, trainers[1], proofs) != base, "trainer");
        TaskMarket other = new TaskMarket(token, stakes);
        assertTrue(new TaskMarketLens(other).commitmentOf(taskId, 1, 1, trainers[0], proofs) != base, "contract");
        vm.chainId(block.chainid + 1);
        assertTrue(lens.commitmentOf(taskId, 1, 1, trainers[0], proofs) != base, "chain");
    }

    function test_FixCheckSeedAfterDeadlineOnly() public {
        (uint256 submitDeadline,,) = lens.deadlinesOf(taskId, 0);
        vm.expectRevert(
            abi.encodeWithSelector(
                ITaskMarket.MarketOutsideWindow.selector, block.timestamp, submitDeadline, type(uint256).max
            )
        );
        market.fixCheckSeed(taskId, "");
        uint256 id = _submit(taskId, 0, trainers[0], 1);
        assertEq(lens.assignedValidators(id).length, 0, "no assignment before the seed");
        _warpToValidate(taskId, 0);
        market.fixCheckSeed(taskId, "");
        ITaskMarket.Round memory rd = market.getRound(taskId, 0);
        assertTrue(rd.checkSeed != 0, "seed fixed");
        assertEq(rd.validatorCount, VALIDATORS, "snapshot");
        assertEq(rd.seatStake, VALIDATORS * 100 * TOKEN, "seat stake snapshot: a seat of 100 each");
        assertTrue(lens.isSampled(id), "sampled at p = 1");
        address[] memory assigned = lens.assignedValidators(id);
        assertEq(assigned.length, 3, "k assigned");
        market.fixCheckSeed(taskId, "");
        assertEq(market.getRound(taskId, 0).checkSeed, rd.checkSeed, "fixed once");
    }

    function testFuzz_AssignedIffSampled(bytes32 randomness) public {
        ITaskMarket.TaskParams memory p = _params();
        p.sampleRatePpm = 500_000;
        p.colludingSharePpm = 0; // deters at S = R; this test is about sampling
        p.slashAmount = uint96(450 * TOKEN);
        p.minTrainerStake = uint96(450 * TOKEN);
        uint256 halfTask = _createTask(p);
        for (uint256 i = 0; i < validators.length; ++i) {
            vm.prank(validators[i]);
            market.joinTask(halfTask, 100 * TOKEN);
        }
        uint256[] memory ids = new uint256[](3);
        for (uint256 i = 0; i < 3; ++i) {
            ids[i] = _submit(halfTask, 0, trainers[i], 1);
        }
        _warpToValidate(halfTask, 0);
        vm.prevrandao(randomness);
        market.fixCheckSeed(halfTask, "");
        for (uint256 i = 0; i < 3; ++i) {
            bool sampled = lens.isSampled(ids[i]);
            assertEq(lens.assignedValidators(ids[i]).length, sampled ? 3 : 0, "assigned iff sampled");
        }
    }
}
