// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {BaseTest} from "./BaseTest.sol";
import {IStakeManager} from "../src/interfaces/IStakeManager.sol";
import {ITaskMarket} from "../src/interfaces/ITaskMarket.sol";

contract TaskMarketCreateTest is BaseTest {
    function test_CreateTask() public {
        uint256 deployedAt = market.deployedAt();
        uint256 before = token.balanceOf(creator);
        uint256 taskId = _createTask(_params());
        assertEq(taskId, 1, "first id");
        assertEq(market.taskCount(), 1, "count");
        // The counter shares its slot with the deployment block: writing it left that block as it was.
        assertEq(market.deployedAt(), deployedAt, "deployment block kept");
        assertTrue(deployedAt != 0, "deployment block recorded");
        ITaskMarket.Task memory task = market.getTask(taskId);
        assertEq(task.creator, creator, "creator");
        assertEq(task.bounty, 1000 * TOKEN, "bounty recorded");
        assertEq(token.balanceOf(address(market)), 1000 * TOKEN, "escrowed");
        assertEq(before - token.balanceOf(creator), 1000 * TOKEN, "bounty pulled");
        ITaskMarket.Round memory round0 = market.getRound(taskId, 0);
        assertEq(round0.checkpoint, keccak256("bafy-model"), "round 0 on the initial model");
        assertTrue(round0.workSeed != 0, "work seed set at opening");
        assertEq(round0.openedAt, block.timestamp, "opened now");
    }

    function test_RevertWhen_CreateWithEmptyCid() public {
        ITaskMarket.TaskParams memory p = _params();
        vm.prank(creator);
        vm.expectRevert(ITaskMarket.MarketEmptyCid.selector);
        market.createTask(p, "", "bafy-env");
    }

    function test_RevertWhen_DeterrenceTooLow() public {
        ITaskMarket.TaskParams memory p = _params();
        p.sampleRatePpm = 100_000; // p = 0.1: needs S >= 9 R = 9 * 450 tokens
        uint256 maxReward = 450 * TOKEN;
        vm.prank(creator);
        vm.expectRevert(
            abi.encodeWithSelector(ITaskMarket.MarketDeterrenceTooLow.selector, 100_000, p.slashAmount, maxReward)
        );
        market.createTask(p, "m", "e");
    }

    function test_DeterrenceAtTheBoundaryIsAccepted() public {
        ITaskMarket.TaskParams memory p = _params();
        p.sampleRatePpm = 500_000; // p = 0.5 and nobody colluding: S >= R exactly
        p.colludingSharePpm = 0;
        p.slashAmount = uint96(450 * TOKEN);
        p.minTrainerStake = p.slashAmount;
        _createTask(p);
        p.slashAmount -= 1;
        vm.prank(creator);
        vm.expectRevert(
            abi.encodeWithSelector(ITaskMarket.MarketDeterrenceTooLow.selector, 500_000, p.slashAmount, 450 * TOKEN)
        );
        market.createTask(p, "m", "e");
    }

    function test_RevertWhen_ParameterOutOfRange() public {
        bytes4 below = ITaskMarket.MarketParameterBelow.selector;
        bytes4 above = ITaskMarket.MarketParameterAbove.selector;
        ITaskMarket.TaskParams memory p = _params();
        p.rounds = 0;
        _expectLimitRevert(p, below, "rounds", 0, 1);
        p = _params();
        p.validatorsPerCheck = 17;
        _expectLimitRevert(p, above, "validatorsPerCheck", 17, 16);
        p = _params();
        p.sampleRatePpm = 1_000_001;
        _expectLimitRevert(p, above, "sampleRatePpm", 1_000_001, 1_000_000);
        p = _params();
        p.minTrainerStake = p.slashAmount - 1;
        _expectLimitRevert(p, below, "minTrainerStake", p.minTrainerStake, p.slashAmount);
        p = _params();
        p.bounty = 0;
        _expectLimitRevert(p, below, "bounty", 0, 1);
        p = _params();
        p.validatorFeeBps = 10_001;
        _expectLimitRevert(p, above, "validatorFeeBps", 10_001, 10_000);
        p = _params();
        p.submitWindow = 0;
        _expectLimitRevert(p, below, "submitWindow", 0, 5);
        p = _params();
        p.maxWorkUnits = 0;
        _expectLimitRevert(p, below, "maxWorkUnits", 0, 1);
    }

    /// Each limit, refused with the value and the bound it broke. Shown failing on the contract before
    /// issue 17's limits in `Params.check`: every case below was accepted.
    function test_RevertWhen_LimitBroken() public {
        ITaskMarket.TaskParams memory p = _params();
        p.rounds = 1001;
        _expectLimitRevert(p, ITaskMarket.MarketParameterAbove.selector, "rounds", 1001, 1000);
        p = _params();
        p.minValidatorStake = 0;
        _expectLimitRevert(p, ITaskMarket.MarketParameterBelow.selector, "minValidatorStake", 0, 1);
        p = _params();
        p.validatorSlash = 0;
        _expectLimitRevert(p, ITaskMarket.MarketParameterBelow.selector, "validatorSlash", 0, 1);
        p = _params();
        p.validatorSlash = p.minValidatorStake + 1;
        p.disputeBond = p.validatorSlash;
        _expectLimitRevert(
            p, ITaskMarket.MarketParameterAbove.selector, "validatorSlash", p.validatorSlash, p.minValidatorStake
        );
        p = _params();
        p.disputeBond = 0;
        _expectLimitRevert(p, ITaskMarket.MarketParameterBelow.selector, "disputeBond", 0, p.validatorSlash);
        p = _params();
        p.disputeBond = p.validatorSlash - 1;
        _expectLimitRevert(p, ITaskMarket.MarketParameterBelow.selector, "disputeBond", p.disputeBond, p.validatorSlash);
        p = _params();
        p.submitWindow = 4;
        _expectLimitRevert(p, ITaskMarket.MarketParameterBelow.selector, "submitWindow", 4, 5);
        p = _params();
        p.validateWindow = 1;
        _expectLimitRevert(p, ITaskMarket.MarketParameterBelow.selector, "validateWindow", 1, 5);
        p = _params();
        p.challengeWindow = 4;
        _expectLimitRevert(p, ITaskMarket.MarketParameterBelow.selector, "challengeWindow", 4, 5);
    }

    /// The bounds themselves are accepted: 1000 rounds, 5 s windows, a bond equal to the validator slash
    /// (where nobody colludes, no appeal can be bought and the slash is the floor), a validator slash equal
    /// to the validator stake, and a bond equal to the least with which no appeal pays.
    function test_LimitsAtTheirBoundsAreAccepted() public {
        ITaskMarket.TaskParams memory p = _params();
        p.rounds = 1000;
        p.submitWindow = 5;
        p.validateWindow = 5;
        p.challengeWindow = 5;
        p.validatorSlash = p.minValidatorStake;
        p.colludingSharePpm = 0;
        p.disputeBond = p.validatorSlash;
        _createTask(p);
        p = _params();
        (uint256 least,) = lens.deterrenceOf(p);
        p.disputeBond = uint96(least);
        _createTask(p);
        p.disputeBond -= 1;
        _expectLimitRevert(p, ITaskMarket.MarketParameterBelow.selector, "disputeBond", p.disputeBond, least);
    }

    function _expectLimitRevert(
        ITaskMarket.TaskParams memory p,
        bytes4 selector,
        string memory name,
        uint256 value,
        uint256 bound
    ) internal {
        vm.prank(creator);
        vm.expectRevert(abi.encodeWithSelector(selector, name, value, bound));
        market.createTask(p, "m", "e");
    }

    /// @dev Cheating never pays, over the whole game: for every parameter set `createTask` accepts, a cheat's
    ///      expected gain is not positive when colluders hold the declared share of the seat stake — with the
    ///      check's draw, its colluding positions voting with the honest majority to take their part of the
    ///      finder's share and the fees back, and the appeal to a committee drawn over the whole stake; and the
    ///      market refuses for deterrence only where that gain is positive up to rounding (1e-15 of the
    ///      stakes). Computed here another way than the contract's (`Params.deters`, binomial terms at 1e18): the
    ///      whole distribution of colluding positions by a dynamic programme at 1e36, bounded below and above,
    ///      and the appeal's win chance exact (a tied committee does not uphold). Shown failing on the contract
    ///      before: its rule left the finder's share, the fees and the appeal out, and accepted sets where the
    ///      gain is positive (+643 on a 900 reward with the appeal); and by making `Params.honestMajority`
    ///      count ties as honest (mutant "ties-count-honest"). An honest trainer's appeal of a wrong rejection
    ///      does not lose in expectation either; shown failing with the bond's upper bound removed from
    ///      `Params.check` (the fuzzer finds an accepted set within ten runs; mutant "bond-unbounded-above").
    function testFuzz_CheatingNeverPays(
        uint256 ppm,
        uint256 slash,
        uint256 bounty,
        uint256 rounds,
        uint256 feeBps,
        uint256 colluding,
        uint256 perCheck,
        uint256 finderBps,
        uint256 bond
    ) public {
        ITaskMarket.TaskParams memory p = _params();
        p.sampleRatePpm = uint32(bound(ppm, 1, 1_000_000));
        p.bounty = uint96(bound(bounty, 1, 100_000 * TOKEN));
        p.rounds = uint16(bound(rounds, 1, 50));
        p.validatorFeeBps = uint16(bound(feeBps, 0, 10_000));
        p.slashAmount = uint96(bound(slash, 1, 500_000 * TOKEN));
        p.minTrainerStake = p.slashAmount;
        p.colludingSharePpm = uint32(bound(colluding, 0, 499_999));
        p.validatorsPerCheck = uint8(bound(perCheck, 1, 16));
        p.finderShareBps = uint16(bound(finderBps, 0, 10_000));
        p.disputeBond = uint96(bound(bond, p.validatorSlash, 5_000_000 * TOKEN));
        vm.prank(creator);
        (bool accepted, bytes memory error_) = address(market).call(abi.encodeCall(market.createTask, (p, "m", "e")));
        uint256[2][] memory dist = _colluderDistribution(p.colludingSharePpm, p.validatorsPerCheck);
        if (accepted) {
            (uint256 appealWin, uint256 appealLoss) = _appeal(p, dist, true);
            assertTrue(appealWin <= appealLoss, "an accepted task lets an appeal pay");
            (uint256 gain, uint256 loss) = _cheat(p, dist, true);
            assertTrue(gain <= loss, "an accepted task lets cheating pay");
            (uint256 kept, uint256 lost) = _honestAppeal(p, dist, true);
            assertTrue(kept >= lost, "an accepted task lets an honest appeal lose");
        } else if (bytes4(error_) == ITaskMarket.MarketParameterAbove.selector) {
            // Every other bound is within the fuzzed ranges: only the bond's upper bound refuses here, and only
            // where an honest appeal loses up to the market's rounding of h: each of the k+1 terms of its sum is a
            // binomial coefficient (at most 2^k) times powers rounded down at 1e-18 a factor, so h may lie up to
            // 2^k * (k+1) * 1e-18 under the exact chance (a refusal that matters only where S is below 1e-12 * B).
            (uint256 kept, uint256 lost) = _honestAppeal(p, dist, false);
            uint256 rounding = (uint256(1) << p.validatorsPerCheck) * (uint256(p.validatorsPerCheck) + 1) * 1e18;
            kept -= kept < rounding * p.slashAmount ? kept : rounding * p.slashAmount;
            lost += rounding * p.disputeBond;
            assertTrue(kept < lost, "refused a bond an honest appeal can carry");
        } else if (bytes4(error_) == ITaskMarket.MarketDeterrenceTooLow.selector) {
            (uint256 gain, uint256 loss) = _cheat(p, dist, false);
            uint256 slack = (uint256(p.slashAmount) + p.bounty) * 1e27; // 1e-15 of the stakes, times 1e42
            assertTrue(gain + slack > loss, "refused a task that deters");
        }
    }

    /// @dev A cheat's expected gain and loss times 1e42 (p in ppm times probabilities at 1e36), the gain at its
    ///      most and the loss at its least where `worst`, the other way round otherwise: unsampled or checked
    ///      by a colluding majority it is paid R; checked, its colluding positions earn their share of a round's
    ///      fees F; caught (j < k/2 colluding positions), it loses S less the j/k of the finder's share f*S
    ///      they take back.
    function _cheat(ITaskMarket.TaskParams memory p, uint256[2][] memory dist, bool worst)
        internal
        view
        returns (uint256 gain, uint256 loss)
    {
        uint256 k = p.validatorsPerCheck;
        uint256 reward = lens.maxSubmissionReward(p.bounty, p.rounds, p.validatorFeeBps);
        uint256 largest = p.bounty - (p.bounty / p.rounds) * (p.rounds - 1);
        uint256 fees = largest * p.validatorFeeBps / 10_000;
        uint256 caught; // P(honest majority), at 1e36
        for (uint256 j = 0; 2 * j < k; ++j) {
            uint256 chance = dist[j][worst ? 0 : 1];
            caught += chance;
            loss += p.sampleRatePpm * chance
            * (uint256(p.slashAmount) * k * 10_000 - uint256(p.finderShareBps) * p.slashAmount * j) / (k * 10_000);
        }
        if (caught > 1e36) caught = 1e36;
        gain = (1e42 - p.sampleRatePpm * caught) * reward + p.sampleRatePpm * uint256(p.colludingSharePpm) * 1e30 * fees;
    }

    /// @dev An appeal's expected win and loss times 1e36: it wins when colluders hold more than half of a
    ///      committee of k positions drawn over the whole stake (exactly: a tie does not uphold), and then moves
    ///      at most R + S + k*V + F to its side; otherwise it loses the bond.
    function _appeal(ITaskMarket.TaskParams memory p, uint256[2][] memory dist, bool worst)
        internal
        view
        returns (uint256 win, uint256 loss)
    {
        uint256 k = p.validatorsPerCheck;
        uint256 wins;
        for (uint256 j = k / 2 + 1; j <= k; ++j) {
            wins += dist[j][worst ? 1 : 0];
        }
        if (wins > 1e36) wins = 1e36;
        uint256 largest = p.bounty - (p.bounty / p.rounds) * (p.rounds - 1);
        uint256 gained = lens.maxSubmissionReward(p.bounty, p.rounds, p.validatorFeeBps) + p.slashAmount + k
            * p.validatorSlash + largest * p.validatorFeeBps / 10_000;
        win = wins * gained;
        loss = (1e36 - wins) * p.disputeBond;
    }

    /// @dev An honest trainer's appeal of a wrong rejection, times 1e36: a fresh committee upholds it when honest
    ///      positions hold more than half (fewer than k/2 colluding), and it then keeps at least its slash; otherwise
    ///      it loses the bond. The upholding chance at its least where `worst`, at its most otherwise.
    function _honestAppeal(ITaskMarket.TaskParams memory p, uint256[2][] memory dist, bool worst)
        internal
        pure
        returns (uint256 kept, uint256 lost)
    {
        uint256 upheld;
        for (uint256 j = 0; 2 * j < p.validatorsPerCheck; ++j) {
            upheld += dist[j][worst ? 0 : 1];
        }
        if (upheld > 1e36) upheld = 1e36;
        kept = upheld * p.slashAmount;
        lost = (1e36 - upheld) * p.disputeBond;
    }

    /// @dev P(j of `k` positions are colluders'), each one with chance c, at 1e36: [j][0] rounded down, [j][1] up.
    function _colluderDistribution(uint256 colludingPpm, uint256 k) internal pure returns (uint256[2][] memory d) {
        uint256 one = 1e36;
        uint256 c = colludingPpm * 1e30;
        d = new uint256[2][](k + 1);
        d[0][0] = one;
        d[0][1] = one;
        for (uint256 n = 1; n <= k; ++n) {
            for (uint256 j = n; j > 0; --j) {
                d[j][0] = (d[j][0] * (one - c) + d[j - 1][0] * c) / one;
                d[j][1] = (d[j][1] * (one - c) + d[j - 1][1] * c + one - 1) / one;
            }
            d[0][0] = d[0][0] * (one - c) / one;
            d[0][1] = (d[0][1] * (one - c) + one - 1) / one;
        }
    }

    function test_HonestMajorityIsExactWhereItCanBe() public view {
        // Nobody colluding: every position honest. A third colluding, three positions: 20/27.
        assertEq(lens.honestMajority(0, 3), 1e18, "all honest");
        uint256 twentyOver27 = lens.honestMajority(333_333, 3);
        assertTrue(twentyOver27 <= 740_741_481_481_481_481 && twentyOver27 > 740_740e12, "20/27");
        // One position: honest with chance 1 - c.
        assertEq(lens.honestMajority(250_000, 1), 0.75e18, "1 - c");
        // Two positions: a tie is no majority, so both must be honest.
        assertEq(lens.honestMajority(250_000, 2), 0.5625e18, "(1 - c)^2");
    }

    function test_RevertWhen_ColludingShareIsAMajority() public {
        ITaskMarket.TaskParams memory p = _params();
        p.colludingSharePpm = 500_000;
        _expectLimitRevert(p, ITaskMarket.MarketParameterAbove.selector, "colludingSharePpm", 500_000, 499_999);
    }

    function test_JoinAndLeave() public {
        ITaskMarket.TaskParams memory p = _params();
        p.rounds = 1;
        uint256 taskId = _readyTask(p);
        assertEq(market.membersOf(taskId).length, VALIDATORS, "validators");
        assertEq(stakes.accountOf(validators[0]).locked, 100 * TOKEN, "locked while the task runs");
        vm.prank(validators[0]);
        vm.expectRevert(abi.encodeWithSelector(ITaskMarket.MarketTaskNotEnded.selector, taskId));
        market.leaveTask(taskId);
        _warpToFinal(taskId, 0);
        market.finaliseRound(taskId);
        vm.prank(validators[0]);
        market.leaveTask(taskId);
        assertEq(stakes.accountOf(validators[0]).locked, 0, "released");
        vm.prank(validators[0]);
        vm.expectRevert(abi.encodeWithSelector(ITaskMarket.MarketNotJoined.selector, taskId, validators[0]));
        market.leaveTask(taskId);
    }

    function test_RevertWhen_JoinTwiceOrAsTrainerOrUnknownTask() public {
        uint256 taskId = _readyTask(_params());
        vm.prank(validators[0]);
        vm.expectRevert(abi.encodeWithSelector(ITaskMarket.MarketAlreadyJoined.selector, taskId, validators[0]));
        market.joinTask(taskId, 100 * TOKEN);
        vm.prank(trainers[0]);
        vm.expectRevert(
            abi.encodeWithSelector(
                IStakeManager.StakeRoleMismatch.selector,
                trainers[0],
                IStakeManager.Role.Trainer,
                IStakeManager.Role.Validator
            )
        );
        market.joinTask(taskId, 100 * TOKEN);
        vm.prank(validators[0]);
        vm.expectRevert(abi.encodeWithSelector(ITaskMarket.MarketUnknownTask.selector, 7));
        market.joinTask(7, 100 * TOKEN);
    }
}
