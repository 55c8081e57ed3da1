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
    /// @dev The most rounds a task may have: each round can be stalled a challenge window by a dispute,
    ///      so an unbounded count would let one task hold its bounty for ever.
    uint256 internal constant MAX_ROUNDS = 1000;
    /// @dev The shortest window, in seconds: a shorter one may hold no block at all.
    uint256 internal constant MIN_WINDOW = 5;

    /// @dev Reverts with the first parameter out of range, or when a cheat would expect to gain.
    function check(ITaskMarket.TaskParams calldata p) internal pure {
        if (p.bounty == 0) revert ITaskMarket.MarketParameterOutOfRange("bounty", p.bounty);
        if (p.rounds == 0) revert ITaskMarket.MarketParameterOutOfRange("rounds", p.rounds);
        if (p.sampleRatePpm == 0 || p.sampleRatePpm > PPM) {
            revert ITaskMarket.MarketParameterOutOfRange("sampleRatePpm", p.sampleRatePpm);
        }
        if (p.validatorsPerCheck == 0 || p.validatorsPerCheck > MAX_COMMITTEE) {
            revert ITaskMarket.MarketParameterOutOfRange("validatorsPerCheck", p.validatorsPerCheck);
        }
        if (p.validatorFeeBps > BPS) {
            revert ITaskMarket.MarketParameterOutOfRange("validatorFeeBps", p.validatorFeeBps);
        }
        if (p.finderShareBps > BPS) revert ITaskMarket.MarketParameterOutOfRange("finderShareBps", p.finderShareBps);
        if (p.slashAmount == 0) revert ITaskMarket.MarketParameterOutOfRange("slashAmount", p.slashAmount);
        // A slash larger than the stake a submission locks could not be collected.
        if (p.minTrainerStake < p.slashAmount) {
            revert ITaskMarket.MarketParameterOutOfRange("minTrainerStake", p.minTrainerStake);
        }
        if (p.maxWorkUnits == 0) revert ITaskMarket.MarketParameterOutOfRange("maxWorkUnits", p.maxWorkUnits);
        _checkLimits(p);
        uint256 maxReward = maxSubmissionReward(p.bounty, p.rounds, p.validatorFeeBps);
        if (uint256(p.sampleRatePpm) * p.slashAmount < (PPM - p.sampleRatePpm) * maxReward) {
            revert ITaskMarket.MarketDeterrenceTooLow(p.sampleRatePpm, p.slashAmount, maxReward);
        }
    }

    /// @dev The limits that keep validators answerable and disputes costly (issue 17): a validator locks
    ///      real stake and a lost vote costs some of it, a dispute costs at least what a lost vote does,
    ///      and rounds and windows are bounded.
    function _checkLimits(ITaskMarket.TaskParams calldata p) private pure {
        _atMost("rounds", p.rounds, MAX_ROUNDS);
        _atLeast("minValidatorStake", p.minValidatorStake, 1);
        _atLeast("validatorSlash", p.validatorSlash, 1);
        // A validator slash larger than the stake a validator locks could not be collected.
        _atMost("validatorSlash", p.validatorSlash, p.minValidatorStake);
        // The bond floor: a dispute risks at least what a validator's losing vote costs.
        _atLeast("disputeBond", p.disputeBond, p.validatorSlash);
        _atLeast("submitWindow", p.submitWindow, MIN_WINDOW);
        _atLeast("validateWindow", p.validateWindow, MIN_WINDOW);
        _atLeast("challengeWindow", p.challengeWindow, MIN_WINDOW);
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
