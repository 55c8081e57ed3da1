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
        if (p.submitWindow == 0) revert ITaskMarket.MarketParameterOutOfRange("submitWindow", p.submitWindow);
        if (p.validateWindow == 0) revert ITaskMarket.MarketParameterOutOfRange("validateWindow", p.validateWindow);
        if (p.challengeWindow == 0) revert ITaskMarket.MarketParameterOutOfRange("challengeWindow", p.challengeWindow);
        uint256 maxReward = maxSubmissionReward(p.bounty, p.rounds, p.validatorFeeBps);
        if (uint256(p.sampleRatePpm) * p.slashAmount < (PPM - p.sampleRatePpm) * maxReward) {
            revert ITaskMarket.MarketDeterrenceTooLow(p.sampleRatePpm, p.slashAmount, maxReward);
        }
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
