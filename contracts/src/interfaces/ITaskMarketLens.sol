// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {ITaskMarket} from "./ITaskMarket.sol";

/// @title ITaskMarketLens
/// @notice Views of one market that anyone can recompute from its state: ids, commitments, deadlines
///         and who checks what. They live beside the market, not in it, so the market keeps room under
///         the contract size limit for its rules. Every answer is what the market itself computes
///         when a transaction needs it (the same library code).
interface ITaskMarketLens {
    /// @notice The market this lens reads.
    function market() external view returns (ITaskMarket);
    /// @notice The submission id of `trainer` in `round` of `taskId`.
    function submissionIdOf(uint256 taskId, uint256 round, address trainer) external pure returns (uint256);
    /// @notice The commitment {ITaskMarket-submitWork} emits: binds chain id, the market, task, round, base
    ///         round and trainer to the proofs.
    function commitmentOf(uint256 taskId, uint256 round, uint256 baseRound, address trainer, bytes32 proofsDigest)
        external
        view
        returns (bytes32);
    /// @notice A round's deadlines: submission, attestation, end of challenge window. Reverts
    ///         {ITaskMarket-MarketUnknownTask} for a task that does not exist.
    function deadlinesOf(uint256 taskId, uint256 round)
        external
        view
        returns (uint256 submitDeadline, uint256 validateDeadline, uint256 challengeDeadline);
    /// @notice When the round may be finalised (disputes aside): its challenge deadline, or a challenge window
    ///         after its checkpoint was fixed when that came later (a round opened ahead of finality).
    function finalFromOf(uint256 taskId, uint256 round) external view returns (uint256);
    /// @notice Whether the submission is sampled (false until the check seed is fixed).
    function isSampled(uint256 submissionId) external view returns (bool);
    /// @notice The holders of the positions assigned to check the submission, one per position (a validator
    ///         holding several appears several times; empty until the check seed is fixed or when not sampled).
    function assignedValidators(uint256 submissionId) external view returns (address[] memory);
    /// @notice The holders of the round's aggregator positions, one per position (empty until the check seed is fixed).
    function aggregatorsOf(uint256 taskId, uint256 round) external view returns (address[] memory);
    /// @notice The holders of the submission's dispute committee positions, one per position (empty until the
    ///         dispute's seed is fixed: `fixDisputeSeed`).
    function disputeCommittee(uint256 submissionId) external view returns (address[] memory);
    /// @notice What `createTask`'s deterrence rule makes of these numbers: the least dispute bond with which no
    ///         appeal pays, and whether a cheat's expected gain over the whole game is at most zero.
    function deterrenceOf(ITaskMarket.TaskParams calldata params)
        external
        pure
        returns (uint256 leastDisputeBond, bool deters);
    /// @notice The most one submission can earn in a task with these numbers: the largest round's
    ///         trainer budget (the last round takes the bounty's rounding remainder).
    /// @param bounty The bounty in wei.
    /// @param rounds The number of rounds.
    /// @param validatorFeeBps The validators' share of a round's budget.
    /// @return Amount in wei.
    function maxSubmissionReward(uint256 bounty, uint256 rounds, uint256 validatorFeeBps)
        external
        pure
        returns (uint256);
    /// @notice The chance, in units of 1e18 rounded down, that more than half of `validatorsPerCheck`
    ///         positions are honest when each is a colluder's with chance `colludingSharePpm` / 1e6.
    function honestMajority(uint256 colludingSharePpm, uint256 validatorsPerCheck) external pure returns (uint256);
}
