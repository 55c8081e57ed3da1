// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {ITaskMarket} from "../interfaces/ITaskMarket.sol";
import {Payouts} from "./Payouts.sol";

/// @title Params
/// @notice Parameters and the deterrence rule: the checks a task's parameters pass at creation
///         (`protocol/chain/params.py` runs the same ones, bit for bit, before anything is sent), the figures
///         they are checked against, and whether the next round may open ahead.
library Params {
    uint256 internal constant PPM = 1_000_000;
    uint256 internal constant BPS = Payouts.BPS;
    uint256 internal constant MAX_COMMITTEE = 16;
    /// @dev The most rounds a task may have.
    uint256 internal constant MAX_ROUNDS = 1000;
    /// @dev The shortest window, in seconds: five blocks of one second, the fastest clock a contract that counts
    ///      seconds can assume — the check seed's request, its {Seeds-DELAY} of two blocks, its reading and a
    ///      vote. Slower chains need longer windows, which `task create` measures and asks for.
    uint256 internal constant MIN_WINDOW = 5;
    /// @dev The most rounds a submission's base may lag its round: every step that walks the live rounds
    ///      ({ITaskMarket-fixCheckSeed}) stays bounded, and no update is older than this.
    uint256 internal constant MAX_STALENESS = 8;
    /// @dev The fixed-point unit of probabilities in {honestMajority}.
    uint256 internal constant ONE = 1e18;
    uint256 private constant ONE_PER_PPM = 1e12;

    /// @dev Reverts with the first parameter out of range (`MarketParameterBelow`/`Above`, with the bound
    ///      it broke), or when a cheat would expect to gain over the whole game ({deters}).
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
        // Validators answer for their votes: real stake, a wrong vote that costs some of it (no more than
        // there is), and a dispute that risks at least what a losing vote does.
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
        // Canaries share the trainer budget with real work: at most as many as half the submissions.
        _atMost("canaryRatePpm", p.canaryRatePpm, PPM / 2);
        (uint256 honest, uint256 kept) =
            majority(p.colludingSharePpm, p.validatorsPerCheck, p.finderShareBps, p.slashAmount);
        // The appeal: overturning a verdict must cost the colluders' side at least what it gains, and an honest
        // appeal must not lose in expectation.
        _atLeast("disputeBond", p.disputeBond, leastDisputeBond(p, honest));
        if (honest < ONE) _atMost("disputeBond", p.disputeBond, mostDisputeBond(p, honest));
        if (!deters(p, honest, kept)) {
            revert ITaskMarket.MarketDeterrenceTooLow(
                p.sampleRatePpm, p.slashAmount, Payouts.maxSubmissionReward(p.bounty, p.rounds, p.validatorFeeBps)
            );
        }
    }

    /// @dev The most overturning one verdict can move to the side that overturns it: a trainer's reward and
    ///      its slash (kept instead of lost), the `k` validator slashes of the positions that voted the other
    ///      way (paid to the committee's majority), and a round's fees (votes that lose their fee now earn it).
    function overturnGain(ITaskMarket.TaskParams calldata p) internal pure returns (uint256) {
        return Payouts.maxSubmissionReward(p.bounty, p.rounds, p.validatorFeeBps) + uint256(p.slashAmount)
            + uint256(p.validatorsPerCheck) * p.validatorSlash
            + Payouts.maxRoundFee(p.bounty, p.rounds, p.validatorFeeBps);
    }

    /// @dev The least dispute bond with which no appeal pays: a dispute committee is `k` positions drawn over
    ///      the whole seat stake and decides by more than half of them, so a side holding a share `c` of the
    ///      stake (however split over addresses) wins with chance `m <= 1 - h` (`h` = {honestMajority}), and
    ///      loses the bond otherwise: `m * G <= (1 - m) * B`, i.e. `B >= (1 - h) * G / h`, rounded up (`G` =
    ///      {overturnGain}). At least the validator slash.
    function leastDisputeBond(ITaskMarket.TaskParams calldata p, uint256 honest) internal pure returns (uint256) {
        uint256 least = ((ONE - honest) * overturnGain(p) + honest - 1) / honest;
        return least > p.validatorSlash ? least : p.validatorSlash;
    }

    /// @dev The most dispute bond with which an honest appeal does not lose in expectation: a trainer whose honest
    ///      work a colluding majority of its check voted invalid appeals to a fresh committee, which upholds with
    ///      chance at least `h` ({honestMajority}: honest positions hold more than half of it) and so keeps at least
    ///      its slash `S` (its reward besides); otherwise the bond is lost: `h * S >= (1 - h) * B`, i.e.
    ///      `B <= h * S / (1 - h)`, rounded down (`h` itself rounded down). Unbounded when `h` is one.
    function mostDisputeBond(ITaskMarket.TaskParams calldata p, uint256 honest) internal pure returns (uint256) {
        return honest * p.slashAmount / (ONE - honest);
    }

    /// @dev Whether a cheat's expected gain over the whole game is at most zero (docs/protocol.md, "What a cheat
    ///      can expect"): `(1 - p*h) * R + p*c*F <= p * sum_{j < k/2} P(j) * S * (1 - f*j/k)`, with `R` the most
    ///      a submission earns, `F` the most a round pays in fees (the colluders' positions take a share `c` of a
    ///      check's), `P(j)` the chance `j` of the `k` positions are colluders', who vote with the honest
    ///      majority and take their `j/k` of the finder's share `f*S` back. The appeal adds nothing when
    ///      the bond is at least {leastDisputeBond}; rounds add up, each with its own locked stake. `h` and the
    ///      kept slash come rounded down, so the check errs towards refusing.
    function deters(ITaskMarket.TaskParams calldata p, uint256 honest, uint256 kept) internal pure returns (bool) {
        uint256 sampled = p.sampleRatePpm;
        uint256 gain = (PPM * ONE - sampled * honest)
            * Payouts.maxSubmissionReward(p.bounty, p.rounds, p.validatorFeeBps) + sampled * p.colludingSharePpm
            * ONE_PER_PPM * Payouts.maxRoundFee(p.bounty, p.rounds, p.validatorFeeBps);
        return sampled * kept >= gain;
    }

    /// @dev The chance, in units of ONE and rounded down, that more than half of `perCheck` positions are
    ///      honest when each is a colluder's with chance `colludingPpm` / 1e6 on its own ({Draws}' model).
    function honestMajority(uint256 colludingPpm, uint256 perCheck) internal pure returns (uint256 chance) {
        (chance,) = majority(colludingPpm, perCheck, 0, 0);
    }

    /// @dev Over the draws where honest positions hold a majority (h > perCheck / 2 of them honest): their chance
    ///      `sum C(perCheck, h) a^h c^(perCheck - h)`, a = 1 - c, and the expected slash a cheat loses there, in
    ///      units of ONE * wei, when its colluding positions take their share `(perCheck - h) / perCheck` of the
    ///      finder's share `finderBps` of `slash` back. Powers are products taken one factor at a time, each
    ///      rounded down (so a^h and c^i are the same figures however they are reached), tabled once; each term
    ///      is rounded down before it is counted: both sums are lower bounds, linear in `perCheck`.
    function majority(uint256 colludingPpm, uint256 perCheck, uint256 finderBps, uint256 slash)
        internal
        pure
        returns (uint256 chance, uint256 kept)
    {
        uint256 c = colludingPpm * ONE_PER_PPM;
        uint256[] memory honestPowers = _powers(ONE - c, perCheck); // a^h
        uint256[] memory colluderPowers = _powers(c, perCheck / 2); // c^i; a majority leaves at most k/2
        uint256 choose = 1; // C(perCheck, h), from h = perCheck down
        for (uint256 h = perCheck; 2 * h > perCheck; --h) {
            // slither-disable-next-line divide-before-multiply
            uint256 term = choose * (honestPowers[h] * colluderPowers[perCheck - h] / ONE);
            chance += term;
            kept += term * (slash * perCheck * BPS - finderBps * slash * (perCheck - h)) / (perCheck * BPS);
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

    /// @dev One revert site per kind of bound keeps the market's bytecode small.
    function _atMost(string memory name, uint256 value, uint256 most) private pure {
        if (value > most) revert ITaskMarket.MarketParameterAbove(name, value, most);
    }

    function _atLeast(string memory name, uint256 value, uint256 least) private pure {
        if (value < least) revert ITaskMarket.MarketParameterBelow(name, value, least);
    }
}
