// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {ITaskMarket} from "./interfaces/ITaskMarket.sol";
import {ITaskMarketLens} from "./interfaces/ITaskMarketLens.sol";
import {Draws} from "./libraries/Draws.sol";
import {Ids} from "./libraries/Ids.sol";
import {Params} from "./libraries/Params.sol";
import {Payouts} from "./libraries/Payouts.sol";

/// @title TaskMarketLens
/// @notice The derived views of one {TaskMarket}, read through its getters and computed with the
///         libraries the market runs. Holds no state but the market's address. See {ITaskMarketLens}.
contract TaskMarketLens is ITaskMarketLens {
    /// @inheritdoc ITaskMarketLens
    ITaskMarket public immutable market;

    /// @param taskMarket The market whose state this lens reads.
    constructor(ITaskMarket taskMarket) {
        market = taskMarket;
    }

    /// @inheritdoc ITaskMarketLens
    function submissionIdOf(uint256 taskId, uint256 round, address trainer) external pure returns (uint256) {
        return Ids.submissionId(taskId, round, trainer);
    }

    /// @inheritdoc ITaskMarketLens
    function commitmentOf(uint256 taskId, uint256 round, uint256 baseRound, address trainer, bytes32 proofsDigest)
        external
        view
        returns (bytes32)
    {
        return Ids.commitment(address(market), taskId, round, baseRound, trainer, proofsDigest);
    }

    /// @inheritdoc ITaskMarketLens
    function deadlinesOf(uint256 taskId, uint256 round)
        external
        view
        returns (uint256 submitDeadline, uint256 validateDeadline, uint256 challengeDeadline)
    {
        ITaskMarket.Task memory task = market.getTask(taskId);
        if (task.creator == address(0)) revert ITaskMarket.MarketUnknownTask(taskId);
        return Ids.deadlines(
            market.getRound(taskId, round).openedAt, task.submitWindow, task.validateWindow, task.challengeWindow
        );
    }

    /// @inheritdoc ITaskMarketLens
    function finalFromOf(uint256 taskId, uint256 round) external view returns (uint256) {
        ITaskMarket.Task memory task = market.getTask(taskId);
        if (task.creator == address(0)) revert ITaskMarket.MarketUnknownTask(taskId);
        ITaskMarket.Round memory rd = market.getRound(taskId, round);
        return Ids.finalFrom(rd.openedAt, rd.checkpointAt, task.submitWindow, task.validateWindow, task.challengeWindow);
    }

    /// @inheritdoc ITaskMarketLens
    function isSampled(uint256 submissionId) external view returns (bool) {
        (uint256 taskId, uint256 round) = Ids.taskAndRound(submissionId);
        bytes32 seed = market.getRound(taskId, round).checkSeed;
        return seed != 0 && Draws.isSampled(seed, submissionId, market.getTask(taskId).sampleRatePpm);
    }

    /// @inheritdoc ITaskMarketLens
    function assignedValidators(uint256 submissionId) external view returns (address[] memory) {
        (uint256 taskId, uint256 round) = Ids.taskAndRound(submissionId);
        ITaskMarket.Round memory rd = market.getRound(taskId, round);
        ITaskMarket.Task memory task = market.getTask(taskId);
        if (rd.checkSeed == 0 || !Draws.isSampled(rd.checkSeed, submissionId, task.sampleRatePpm)) {
            return new address[](0);
        }
        return _holders(taskId, Draws.assigned(rd.checkSeed, submissionId, rd.seatStake, task.validatorsPerCheck));
    }

    /// @inheritdoc ITaskMarketLens
    function aggregatorsOf(uint256 taskId, uint256 round) external view returns (address[] memory) {
        ITaskMarket.Round memory rd = market.getRound(taskId, round);
        if (rd.checkSeed == 0) return new address[](0);
        return
            _holders(taskId, Draws.aggregators(rd.checkSeed, rd.seatStake, market.getTask(taskId).validatorsPerCheck));
    }

    /// @inheritdoc ITaskMarketLens
    function disputeCommittee(uint256 submissionId) external view returns (address[] memory) {
        ITaskMarket.Dispute memory d = market.getDispute(submissionId);
        if (d.seed == 0) return new address[](0);
        (uint256 taskId, uint256 round) = Ids.taskAndRound(submissionId);
        return _holders(
            taskId,
            Draws.committee(d.seed, market.getRound(taskId, round).seatStake, market.getTask(taskId).validatorsPerCheck)
        );
    }

    /// @inheritdoc ITaskMarketLens
    function deterrenceOf(ITaskMarket.TaskParams calldata params)
        external
        pure
        returns (uint256 leastDisputeBond, bool deters)
    {
        (uint256 honest, uint256 kept) = Params.majority(
            params.colludingSharePpm, params.validatorsPerCheck, params.finderShareBps, params.slashAmount
        );
        return (Params.leastDisputeBond(params, honest), Params.deters(params, honest, kept));
    }

    /// @inheritdoc ITaskMarketLens
    function maxSubmissionReward(uint256 bounty, uint256 rounds, uint256 validatorFeeBps)
        external
        pure
        returns (uint256)
    {
        return Payouts.maxSubmissionReward(bounty, rounds, validatorFeeBps);
    }

    /// @inheritdoc ITaskMarketLens
    function honestMajority(uint256 colludingSharePpm, uint256 validatorsPerCheck) external pure returns (uint256) {
        return Params.honestMajority(colludingSharePpm, validatorsPerCheck);
    }

    /// @dev Each position's holder: the last member whose range starts at or below it.
    function _holders(uint256 taskId, uint256[] memory drawn) private view returns (address[] memory accounts) {
        ITaskMarket.Member[] memory members = market.membersOf(taskId);
        accounts = new address[](drawn.length);
        for (uint256 j = 0; j < drawn.length; ++j) {
            uint256 i = members.length - 1;
            while (members[i].from > drawn[j]) --i;
            accounts[j] = members[i].account;
        }
    }
}
