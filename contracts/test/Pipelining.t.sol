// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {BaseTest} from "./BaseTest.sol";
import {ITaskMarket} from "../src/interfaces/ITaskMarket.sol";
import {Params} from "../src/libraries/Params.sol";

/// @dev Pipelined rounds (issue 18): rounds open ahead of finality within `maxStaleness`, submissions
///      name the agreed checkpoint they built on, rounds still finalise in order. `make mutants` breaks each
///      rule in turn (scripts/mutants.py names the test that must catch it).
contract PipeliningTest is BaseTest {
    uint256 internal taskId;

    function setUp() public override {
        super.setUp();
        ITaskMarket.TaskParams memory p = _params();
        p.rounds = 4;
        p.maxStaleness = 1;
        taskId = _readyTask(p);
    }

    function _submitOn(uint256 round, uint256 baseRound, address trainer) internal returns (uint256 id) {
        vm.prank(trainer);
        id = market.submitWork(
            taskId, round, baseRound, "bafy-rollouts", "bafy-update", 100, keccak256("proofs"), keccak256("tag")
        );
    }

    function _expectBaseRefused(uint256 round, uint256 baseRound, uint256 current, uint256 staleness) internal {
        vm.expectRevert(
            abi.encodeWithSelector(
                ITaskMarket.MarketBaseOutOfBound.selector, taskId, round, baseRound, current, staleness
            )
        );
    }

    function _openAhead() internal {
        (uint256 submitDeadline,,) = lens.deadlinesOf(taskId, market.getTask(taskId).openRound);
        if (block.timestamp < submitDeadline) vm.warp(submitDeadline);
        vm.roll(block.number + 1);
        market.openNextRound(taskId);
    }

    /// Round 0 through its windows with its seed fixed and its aggregate agreed (its three aggregators
    /// propose "bafy-next"), then finalised `late` seconds after it could have been.
    function _finaliseRoundZero(uint256 late) internal {
        _warpToValidate(taskId, 0);
        _warpToChallenge(taskId, 0);
        address[] memory aggregators = lens.aggregatorsOf(taskId, 0);
        uint256 epoch = market.getRound(taskId, 0).checkpointEpoch;
        for (uint256 j = 0; j < aggregators.length; ++j) {
            vm.prank(aggregators[j]);
            market.proposeCheckpoint(taskId, 0, epoch, "bafy-next");
        }
        vm.warp(lens.finalFromOf(taskId, 0) + late);
        vm.roll(block.number + 1);
        market.finaliseRound(taskId);
    }

    // ------------------------------------------------------------ opening ahead

    /// With `maxStaleness` 0 nothing opens ahead: rounds stay sequential (the default for every task made
    /// before pipelining). Broken by: dropping the bound in `checkOpenAhead` (mutant "open-ahead-unbounded").
    function test_RevertWhen_OpenAheadWithStalenessZero() public {
        ITaskMarket.TaskParams memory p = _params();
        uint256 sequential = _createTask(p);
        (uint256 submitDeadline,,) = lens.deadlinesOf(sequential, 0);
        vm.warp(submitDeadline);
        vm.expectRevert(abi.encodeWithSelector(ITaskMarket.MarketStalenessBound.selector, sequential, 1, 0, 0));
        market.openNextRound(sequential);
    }

    function test_RevertWhen_OpenAheadBeforeSubmissionsClose() public {
        (uint256 submitDeadline,,) = lens.deadlinesOf(taskId, 0);
        vm.warp(submitDeadline - 1);
        vm.expectRevert(
            abi.encodeWithSelector(
                ITaskMarket.MarketOutsideWindow.selector, submitDeadline - 1, submitDeadline, type(uint256).max
            )
        );
        market.openNextRound(taskId);
    }

    /// Round 1 opens once round 0 stops taking work, with its own seed and no checkpoint yet; round 2 waits
    /// until round 0 is final (it would be two rounds ahead).
    function test_OpenAheadWithinTheBound() public {
        _submitOn(0, 0, trainers[0]);
        _openAhead();
        ITaskMarket.Task memory task = market.getTask(taskId);
        assertEq(task.openRound, 1, "round 1 open");
        assertEq(task.currentRound, 0, "round 0 still current");
        ITaskMarket.Round memory next = market.getRound(taskId, 1);
        assertEq(next.openedAt, block.timestamp, "opened now");
        assertTrue(next.workSeed != 0 && next.workSeed != market.getRound(taskId, 0).workSeed, "its own seed");
        assertEq(next.checkpoint, bytes32(0), "no checkpoint until round 0 is final");
        (uint256 submitDeadline,,) = lens.deadlinesOf(taskId, 1);
        vm.warp(submitDeadline);
        vm.expectRevert(abi.encodeWithSelector(ITaskMarket.MarketStalenessBound.selector, taskId, 2, 0, 1));
        market.openNextRound(taskId);
    }

    function test_RevertWhen_OpenAheadPastTheLastRound() public {
        ITaskMarket.TaskParams memory p = _params();
        p.rounds = 1;
        p.maxStaleness = 3;
        uint256 single = _createTask(p);
        (uint256 submitDeadline,,) = lens.deadlinesOf(single, 0);
        vm.warp(submitDeadline);
        vm.expectRevert(abi.encodeWithSelector(ITaskMarket.MarketStalenessBound.selector, single, 1, 0, 3));
        market.openNextRound(single);
    }

    function test_RevertWhen_StalenessAboveTheMost() public {
        ITaskMarket.TaskParams memory p = _params();
        p.maxStaleness = uint8(Params.MAX_STALENESS + 1);
        vm.prank(creator);
        vm.expectRevert(
            abi.encodeWithSelector(
                ITaskMarket.MarketParameterAbove.selector,
                "maxStaleness",
                Params.MAX_STALENESS + 1,
                Params.MAX_STALENESS
            )
        );
        market.createTask(p, "bafy-model", "bafy-env");
    }

    // ------------------------------------------------------------ bases

    /// Two trainers work on round 1 on round 0's checkpoint while round 0 is validated; the base is bound
    /// into the commitment and kept with the submission.
    function test_SubmitOnAStaleBaseWhileTheRoundBeforeIsValidated() public {
        _submitOn(0, 0, trainers[0]);
        _openAhead();
        _warpToValidate(taskId, 0);
        uint256 a = _submitOn(1, 0, trainers[1]);
        uint256 b = _submitOn(1, 0, trainers[2]);
        assertEq(market.getSubmission(a).baseRound, 0, "base kept");
        assertEq(market.getSubmission(b).workUnits, 100, "second taken");
        assertEq(market.getRound(taskId, 1).submissionCount, 2, "two in round 1");
    }

    /// A base not agreed yet (round 1 while round 0 is not final) is refused. Broken by: dropping
    /// `baseRound > current` from `checkSubmission` (mutant "base-not-agreed").
    function test_RevertWhen_BaseNotAgreed() public {
        _openAhead();
        _expectBaseRefused(1, 1, 0, 1);
        _submitOn(1, 1, trainers[0]);
    }

    /// A base after the submission's own round is refused, even an agreed one.
    function test_RevertWhen_BaseFromTheFuture() public {
        _openAhead();
        _finaliseRoundZero(0); // round 1 is current now, round 0 agreed
        // Round 0 is closed, so "the future" is checked on round 1 naming base 2 (not agreed, and after it).
        _expectBaseRefused(1, 2, 1, 1);
        _submitOn(1, 2, trainers[0]);
    }

    /// A base more than `maxStaleness` behind is refused: round 2 on round 0's checkpoint with bound 1.
    /// Broken by: dropping `round - baseRound > maxStaleness` (mutant "staleness-unbounded").
    function test_RevertWhen_BaseTooOld() public {
        _openAhead();
        _finaliseRoundZero(0);
        _openAhead(); // round 2, one ahead of the current round 1
        _expectBaseRefused(2, 0, 1, 1);
        _submitOn(2, 0, trainers[0]);
        _submitOn(2, 1, trainers[0]); // one round stale: taken
    }

    /// A base that is agreed in another task but not in this one is refused: bases are this task's rounds.
    function test_RevertWhen_BaseFromAnotherTask() public {
        ITaskMarket.TaskParams memory p = _params();
        p.rounds = 4;
        p.maxStaleness = 3;
        uint256 other = _createTask(p);
        for (uint256 r = 0; r < 3; ++r) {
            (,, uint256 challengeDeadline) = lens.deadlinesOf(other, r);
            vm.warp(challengeDeadline);
            market.finaliseRound(other); // nobody submitted: final on its windows alone
        }
        assertEq(market.getTask(other).currentRound, 3, "round 3 agreed in the other task");
        _openAhead();
        _expectBaseRefused(1, 3, 0, 1);
        _submitOn(1, 3, trainers[0]);
    }

    function test_RevertWhen_RoundNotOpen() public {
        vm.expectRevert(abi.encodeWithSelector(ITaskMarket.MarketWrongRound.selector, taskId, 1, 0));
        _submitOn(1, 0, trainers[0]);
    }

    /// Fuzz: whatever round and base a trainer names while round 0 is validated and round 1 open, the
    /// market takes it exactly when the round is open and the base agreed, not after it and in the bound.
    function testFuzz_BaseRule(uint8 round, uint8 baseRound) public {
        _openAhead();
        uint256 r = bound(round, 0, 3);
        uint256 b = bound(baseRound, 0, 4);
        (uint256 submitDeadline,,) = lens.deadlinesOf(taskId, r);
        bool open = r <= 1 && block.timestamp < submitDeadline;
        bool inBound = b == 0 && b <= r && r - b <= 1; // round 0 is the only agreed one
        vm.prank(trainers[0]);
        try market.submitWork(taskId, r, b, "bafy-rollouts", "bafy-update", 100, keccak256("p"), keccak256("tag")) {
            assertTrue(open && inBound, "taken out of the rule");
        } catch {
            assertTrue(!(open && inBound), "refused within the rule");
        }
    }

    // ------------------------------------------------------------ finality

    /// Round 0's end gives round 1 (opened ahead) the agreed checkpoint and opens nothing new; round 1
    /// waits a whole challenge window after that before it can be final, so its aggregators get one.
    /// Broken by: finalising a round on its own windows alone (mutant "finalise-before-checkpoint-window").
    function test_FinaliseFixesTheCheckpointOfTheRoundOpenedAhead() public {
        _submitOn(0, 0, trainers[0]);
        _openAhead();
        _submitOn(1, 0, trainers[1]);
        _finaliseRoundZero(60); // nobody finalised round 0 for a minute: round 1's windows went on
        ITaskMarket.Task memory task = market.getTask(taskId);
        assertEq(task.currentRound, 1, "round 1 current");
        assertEq(task.openRound, 1, "no round opened by finality");
        ITaskMarket.Round memory next = market.getRound(taskId, 1);
        assertEq(next.checkpoint, keccak256("bafy-next"), "round 0's agreed checkpoint");
        assertEq(next.checkpointAt, block.timestamp, "fixed now");
        uint256 finalFrom = lens.finalFromOf(taskId, 1);
        assertEq(finalFrom, block.timestamp + 100, "a challenge window from now");
        (,, uint256 challengeDeadline) = lens.deadlinesOf(taskId, 1);
        assertTrue(challengeDeadline < finalFrom, "later than its own windows");
        _warpToValidate(taskId, 1);
        vm.warp(finalFrom - 1);
        vm.expectRevert(
            abi.encodeWithSelector(
                ITaskMarket.MarketOutsideWindow.selector, finalFrom - 1, finalFrom, type(uint256).max
            )
        );
        market.finaliseRound(taskId);
        vm.warp(finalFrom);
        market.finaliseRound(taskId);
        assertTrue(market.getRound(taskId, 1).finalised, "final");
    }

    /// `fixCheckSeed` serves every live round past its submission window and before its validate deadline:
    /// round 0 and round 1 both, here where round 0's validate window outlasts round 1's submit window.
    function test_FixCheckSeedServesEveryLiveRound() public {
        ITaskMarket.TaskParams memory p = _params();
        p.rounds = 4;
        p.maxStaleness = 1;
        p.validateWindow = 200;
        taskId = _createTask(p);
        for (uint256 i = 0; i < validators.length; ++i) {
            vm.prank(validators[i]);
            market.joinTask(taskId, p.minValidatorStake);
        }
        _submitOn(0, 0, trainers[0]);
        _openAhead();
        _submitOn(1, 0, trainers[1]);
        (uint256 submitDeadline,,) = lens.deadlinesOf(taskId, 1);
        vm.warp(submitDeadline);
        _requestAndFixSeeds(taskId);
        assertTrue(market.getRound(taskId, 0).checkSeed != 0, "round 0 seed");
        assertTrue(market.getRound(taskId, 1).checkSeed != 0, "round 1 seed");
        assertTrue(market.getRound(taskId, 0).checkSeed != market.getRound(taskId, 1).checkSeed, "distinct");
    }

    /// Money with overlapping rounds: every round settles, pays and slashes as in sequence, and the market
    /// holds exactly what it owes throughout.
    function test_OverlappingRoundsConserveTokens() public {
        _submitOn(0, 0, trainers[0]);
        _openAhead();
        _submitOn(1, 0, trainers[1]);
        uint256 cheat = _submitOn(1, 0, trainers[2]);
        _assertMarketConserved(1, 0);
        _finaliseRoundZero(0);
        _warpToValidate(taskId, 1);
        _attestAll(lens.submissionIdOf(taskId, 1, trainers[1]), true);
        _attestAll(cheat, false);
        assertTrue(market.getSubmission(cheat).rejected, "the stale cheat rejected");
        vm.warp(lens.finalFromOf(taskId, 1));
        market.finaliseRound(taskId);
        market.settle(lens.submissionIdOf(taskId, 0, trainers[0]));
        market.settle(lens.submissionIdOf(taskId, 1, trainers[1]));
        uint256 before = _stakeOf(trainers[2]);
        market.settle(cheat);
        assertEq(before - _stakeOf(trainers[2]), 500 * TOKEN, "slashed");
        _assertMarketConserved(1, 0);
    }
}
