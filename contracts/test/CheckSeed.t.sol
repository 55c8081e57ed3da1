// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {BaseTest} from "./BaseTest.sol";
import {ITaskMarket} from "../src/interfaces/ITaskMarket.sol";

/// @dev Randomness nobody steers: the check seed comes from the prevrandao of a block named before it exists,
///      whoever sends the transaction, whenever, and whatever the producer of that block puts in it; a dispute
///      committee likewise. Default task: p = 1/2, 3 of 8 validators per check.
contract CheckSeedTest is BaseTest {
    uint256 internal taskId;
    uint256 internal id;

    function setUp() public override {
        super.setUp();
        ITaskMarket.TaskParams memory p = _params();
        p.sampleRatePpm = 500_000;
        p.colludingSharePpm = 0; // these tests are about the seed
        p.slashAmount = uint96(1000 * TOKEN);
        p.minTrainerStake = p.slashAmount;
        taskId = _readyTask(p);
        id = _submit(taskId, 0, trainers[0], 100);
        (uint256 submitDeadline,,) = lens.deadlinesOf(taskId, 0);
        vm.warp(submitDeadline);
        vm.roll(block.number + 1);
    }

    /// The first call only names a block two ahead; whoever fixes the seed after that block, and whenever,
    /// gets the same seed, the one its prevrandao gives.
    function test_TheSeedIsTheSameWhoeverFixesItAndWhenever() public {
        uint256 requestedAt = block.number;
        vm.prank(trainers[0]);
        market.fixCheckSeed(taskId, "");
        ITaskMarket.Round memory rd = market.getRound(taskId, 0);
        assertEq(rd.seedBlock, requestedAt + 2, "a block still to come");
        assertEq(rd.checkSeed, bytes32(0), "not fixed by the request");
        // Nothing can use the seed before it is fixed.
        vm.roll(requestedAt + 3);
        vm.prank(validators[0]);
        vm.expectRevert(abi.encodeWithSelector(ITaskMarket.MarketCheckSeedPending.selector, taskId, 0, requestedAt + 2));
        market.commitAttestation(id, bytes32(0));

        bytes32 mix = _mixOf(requestedAt + 2);
        bytes memory header = _seedHeader(requestedAt + 2, mix);
        uint256 snapshot = vm.snapshotState();
        vm.prank(trainers[0]);
        market.fixCheckSeed(taskId, header);
        bytes32 byTrainer = market.getRound(taskId, 0).checkSeed;
        vm.revertToState(snapshot);
        vm.roll(requestedAt + 40);
        vm.prank(auditor);
        market.fixCheckSeed(taskId, header);
        bytes32 byAuditorLater = market.getRound(taskId, 0).checkSeed;
        assertEq(byTrainer, byAuditorLater, "the same seed whoever fixes it, whenever");
        assertEq(byTrainer, keccak256(abi.encode(mix, taskId, 0, "check")), "the block's prevrandao");
    }

    /// Hole 5, the producer of the seed block chose the seed: it was keccak(blockhash(seedBlock), ...), and the
    /// block's hash is whatever its producer makes it by choosing what goes in the block; a producer that
    /// wants a submission unsampled tries contents until it is. Here the attacker builds the seed block
    /// 64 ways (another `extraData` each: any field would do) and keeps the first that leaves its submission
    /// unsampled. Now every version of the block gives the same seed (its prevrandao is not the producer's to
    /// choose), so either all of them sample the submission or none does. Shown failing on the contract
    /// before (seed from `blockhash`): at p = 1/2 the attacker's first or second version left it unsampled
    /// while others sampled it.
    function test_TheSeedBlocksProducerCannotChooseTheSeed() public {
        market.fixCheckSeed(taskId, "");
        uint256 at = market.getRound(taskId, 0).seedBlock;
        vm.roll(at + 1);
        bytes32 mix = _mixOf(at);
        bytes32 first;
        for (uint256 version = 0; version < 64; ++version) {
            uint256 snapshot = vm.snapshotState();
            market.fixCheckSeed(taskId, _seedHeaderWith(at, mix, keccak256(abi.encode(version))));
            bytes32 seed = market.getRound(taskId, 0).checkSeed;
            if (version == 0) first = seed;
            assertEq(seed, first, "every version of the block gives one seed");
            vm.revertToState(snapshot);
        }
    }

    /// A header that is not the block's (wrong bytes for its number) is refused by name; a real header of a
    /// block no round asked for fixes nothing.
    function test_RevertWhen_TheHeaderIsNotTheBlocks() public {
        market.fixCheckSeed(taskId, "");
        uint256 at = market.getRound(taskId, 0).seedBlock;
        vm.roll(at + 1);
        bytes memory header = _seedHeader(at, _mixOf(at));
        vm.setBlockhash(at, keccak256("another block"));
        vm.expectRevert(abi.encodeWithSelector(ITaskMarket.MarketWrongHeader.selector, at));
        market.fixCheckSeed(taskId, header);
        market.fixCheckSeed(taskId, _seedHeader(at - 1, _mixOf(at - 1)));
        assertEq(market.getRound(taskId, 0).checkSeed, bytes32(0), "another block's header fixes nothing");
    }

    /// The validator count is taken at the request, before the seed is known: a validator who joins
    /// once the seed block is public cannot move anyone's draw.
    function test_TheValidatorCountIsTakenAtTheRequest() public {
        market.fixCheckSeed(taskId, "");
        ITaskMarket.Round memory rd = market.getRound(taskId, 0);
        vm.roll(block.number + 3);
        _joinAsNewValidator(_actor("late validator", 99), taskId, 200 * TOKEN, 100 * TOKEN);
        _fixSeedWith(taskId, rd.seedBlock, _mixOf(rd.seedBlock));
        assertEq(market.getRound(taskId, 0).validatorCount, rd.validatorCount, "the count of the request");
        assertTrue(market.getRound(taskId, 0).checkSeed != 0, "fixed");
    }

    /// Past 256 blocks the requested block's hash is gone: no header can be checked against it, and
    /// `fixCheckSeed` names a new block still to come instead.
    function test_PastTheHorizonANewBlockIsRequested() public {
        market.fixCheckSeed(taskId, "");
        uint256 first = market.getRound(taskId, 0).seedBlock;
        vm.roll(first + 300);
        vm.prank(validators[0]);
        vm.expectRevert(abi.encodeWithSelector(ITaskMarket.MarketCheckSeedPending.selector, taskId, 0, first));
        market.commitAttestation(id, bytes32(0));
        market.fixCheckSeed(taskId, "");
        uint256 second = market.getRound(taskId, 0).seedBlock;
        assertEq(second, first + 302, "a new block two ahead");
        vm.roll(second + 1);
        _fixSeedWith(taskId, second, _mixOf(second));
        assertEq(
            market.getRound(taskId, 0).checkSeed,
            keccak256(abi.encode(_mixOf(second), taskId, 0, "check")),
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

    /// A dispute's committee comes from the prevrandao of a block named when it was filed. When nobody fixed
    /// it within 256 blocks its hash is gone: the next `fixDisputeSeed` moves the seed block two ahead of
    /// itself (no caller knows that block's prevrandao) and draws nothing; the committee follows from the new
    /// block. (Before, the first vote past the horizon drew the committee from the voter's own parent
    /// block, so that voter chose its committee by choosing when to vote: mutant "dispute-block-chosen".)
    function test_ALostDisputeBlockIsReplacedNotChosen() public {
        _requestAndFixSeeds(taskId);
        _warpToChallenge(taskId, 0);
        vm.prank(auditor);
        market.dispute(id, false);
        uint256 filed = market.getDispute(id).seedBlock;
        vm.roll(filed + 300);
        assertEq(lens.disputeCommittee(id).length, 0, "no committee while its seed is not fixed");
        vm.prank(validators[0]);
        vm.expectRevert(abi.encodeWithSelector(ITaskMarket.MarketNoCommittee.selector, id));
        market.commitDisputeVote(id, bytes32(0));
        vm.prank(validators[0]);
        vm.expectEmit();
        emit ITaskMarket.DisputeBlockMoved(id, filed + 302);
        market.fixDisputeSeed(id, "");
        ITaskMarket.Dispute memory d = market.getDispute(id);
        assertEq(d.seed, bytes32(0), "nothing drawn");
        assertEq(d.seedBlock, filed + 302, "a block two ahead of the call");
        _fixDisputeSeedWith(id, _mixOf(filed + 302));
        assertEq(
            market.getDispute(id).seed, keccak256(abi.encode(_mixOf(filed + 302), id, "dispute")), "its prevrandao"
        );
        address[] memory committee = lens.disputeCommittee(id);
        assertTrue(committee.length == 3, "a committee from the new block");
        _disputeVote(committee[0], id, true, "e");
        assertTrue(market.getDispute(id).votedMask != 0, "and its votes count");
    }
}
