// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {ITaskMarket} from "../interfaces/ITaskMarket.sol";

/// @title Params
/// @notice The checks a task's parameters pass at creation (`protocol/chain/params.py` runs the same
///         ones before anything is sent) and the figures they are checked against.
library Params {
    uint256 internal constant PPM = 1_000_000;
    uint256 internal constant BPS = 10_000;
    uint256 internal constant MAX_COMMITTEE = 16;
    /// @dev The most rounds a task may have.
    uint256 internal constant MAX_ROUNDS = 1000;
    /// @dev The shortest window, in seconds: a shorter one may hold no block at all.
    uint256 internal constant MIN_WINDOW = 5;
    /// @dev The most rounds a submission's base may lag its round: every step that walks the live rounds
    ///      ({ITaskMarket-fixCheckSeed}) stays bounded, and no update is older than this.
    uint256 internal constant MAX_STALENESS = 8;
    /// @dev The fixed-point unit of probabilities in {honestMajority}.
    uint256 internal constant ONE = 1e18;
    uint256 private constant ONE_PER_PPM = 1e12;

    /// @dev Reverts with the first parameter out of range (`MarketParameterBelow`/`Above`, with the bound
    ///      it broke), or when a cheat would expect to gain.
    function check(ITaskMarket.TaskParams calldata p) external pure {
        _atLeast("bounty", p.bounty, 1);
        _atLeast("rounds", p.rounds, 1);
        // Each round can be stalled a challenge window by a dispute: an unbounded count would let one
        // task hold its bounty for ever.
        _atMost("rounds", p.rounds, MAX_ROUNDS);
        _atLeast("sampleRatePpm", p.sampleRatePpm, 1);
        _atMost("sampleRatePpm", p.sampleRatePpm, PPM);
        _atLeast("validatorsPerCheck", p.validatorsPerCheck, 1);
        _atMost("validatorsPerCheck", p.validatorsPerCheck, MAX_COMMITTEE);
        _atMost("validatorFeeBps", p.validatorFeeBps, BPS);
        _atMost("finderShareBps", p.finderShareBps, BPS);
        _atLeast("slashAmount", p.slashAmount, 1);
        // A slash larger than the stake a submission locks could not be collected.
        _atLeast("minTrainerStake", p.minTrainerStake, p.slashAmount);
        _atLeast("maxWorkUnits", p.maxWorkUnits, 1);
        // Validators answer for their votes (issue 17): real stake, a wrong vote that costs some of it
        // (no more than there is), and a dispute that risks at least what a losing vote does.
        _atLeast("minValidatorStake", p.minValidatorStake, 1);
        _atLeast("validatorSlash", p.validatorSlash, 1);
        _atMost("validatorSlash", p.validatorSlash, p.minValidatorStake);
        _atLeast("disputeBond", p.disputeBond, p.validatorSlash);
        _atLeast("submitWindow", p.submitWindow, MIN_WINDOW);
        _atLeast("validateWindow", p.validateWindow, MIN_WINDOW);
        _atLeast("challengeWindow", p.challengeWindow, MIN_WINDOW);
        // A colluding majority of the seat stake decides every check: nothing on chain can deter that.
        _atMost("colludingSharePpm", p.colludingSharePpm, PPM / 2 - 1);
        _atMost("maxStaleness", p.maxStaleness, MAX_STALENESS);
        uint256 maxReward = maxSubmissionReward(p.bounty, p.rounds, p.validatorFeeBps);
        // q, the chance a cheat is caught, in units of PPM * ONE: sampled, and an honest majority holds
        // its positions. Rounded down, so the check errs towards refusing.
        uint256 caught = p.sampleRatePpm * honestMajority(p.colludingSharePpm, p.validatorsPerCheck);
        if (caught * p.slashAmount < (PPM * ONE - caught) * maxReward) {
            revert ITaskMarket.MarketDeterrenceTooLow(p.sampleRatePpm, p.slashAmount, maxReward);
        }
    }

    /// @dev The chance, in units of ONE and rounded down, that more than half of `perCheck` positions are
    ///      honest when each is a colluder's with chance `colludingPpm` / 1e6 on its own ({Draws}' model):
    ///      the sum over h > perCheck / 2 of C(perCheck, h) a^h c^(perCheck - h), a = 1 - c.
    ///      Powers are products taken one factor at a time, each rounded down (so a^h and c^i are the same
    ///      figures however they are reached), tabled once: the cost grows linearly with `perCheck`.
    function honestMajority(uint256 colludingPpm, uint256 perCheck) internal pure returns (uint256 chance) {
        uint256 c = colludingPpm * ONE_PER_PPM;
        uint256[] memory honestPowers = _powers(ONE - c, perCheck); // a^h
        uint256[] memory colluderPowers = _powers(c, perCheck / 2); // c^i; a majority leaves at most k/2
        uint256 choose = 1; // C(perCheck, h), from h = perCheck down
        for (uint256 h = perCheck; 2 * h > perCheck; --h) {
            // Each term rounded down before it is counted C(k, h) times: the sum stays a lower bound.
            // slither-disable-next-line divide-before-multiply
            chance += choose * (honestPowers[h] * colluderPowers[perCheck - h] / ONE);
            choose = choose * h / (perCheck - h + 1);
        }
    }

    /// @dev x^0 .. x^n in units of ONE, each product rounded down.
    function _powers(uint256 x, uint256 n) private pure returns (uint256[] memory table) {
        table = new uint256[](n + 1);
        table[0] = ONE;
        for (uint256 i = 1; i <= n; ++i) {
            table[i] = table[i - 1] * x / ONE;
        }
    }

    /// @dev The round {ITaskMarket-openNextRound} opens; reverts when the task ended, has no round left,
    ///      or that round would be more than `maxStaleness` after the current one.
    function checkOpenAhead(ITaskMarket.Task storage task, uint256 taskId) external view returns (uint256 next) {
        if (task.ended) revert ITaskMarket.MarketTaskEnded(taskId);
        next = uint256(task.openRound) + 1;
        if (next >= task.rounds || next - task.currentRound > task.maxStaleness) {
            revert ITaskMarket.MarketStalenessBound(taskId, next, task.currentRound, task.maxStaleness);
        }
    }

    /// @dev A round's trainer and fee budgets: the bounty split evenly across rounds (the last takes the
    ///      rounding remainder), and the fee share of it for validators' checks.
    function roundBudgets(uint256 bounty, uint256 rounds, uint256 round, uint256 validatorFeeBps)
        external
        pure
        returns (uint256 trainerBudget, uint256 feeBudget)
    {
        // The division first is the point: every round gets the floor, the last one the remainder.
        // slither-disable-next-line divide-before-multiply
        uint256 budget = bounty / rounds;
        // slither-disable-next-line divide-before-multiply
        if (round == rounds - 1) budget = bounty - budget * (rounds - 1);
        feeBudget = budget * validatorFeeBps / BPS;
        trainerBudget = budget - feeBudget;
    }

    /// @dev One revert site per kind of bound keeps the market's bytecode small.
    function _atMost(string memory name, uint256 value, uint256 most) private pure {
        if (value > most) revert ITaskMarket.MarketParameterAbove(name, value, most);
    }

    function _atLeast(string memory name, uint256 value, uint256 least) private pure {
        if (value < least) revert ITaskMarket.MarketParameterBelow(name, value, least);
    }

    /// @dev The most one submission can earn: the largest round's trainer budget (the last round
    ///      takes the bounty's rounding remainder).
    function maxSubmissionReward(uint256 bounty, uint256 rounds, uint256 validatorFeeBps)
        internal
        pure
        returns (uint256)
    {
        // slither-disable-next-line divide-before-multiply
        uint256 lastRound = bounty - (bounty / rounds) * (rounds - 1);
        return lastRound - lastRound * validatorFeeBps / BPS;
    }
}
