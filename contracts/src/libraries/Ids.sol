// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {ITaskMarket} from "../interfaces/ITaskMarket.sol";

/// @title Ids
/// @notice Submission ids, commitments, deadlines and the window check, computed one way for the market, its lens and
///         (in `protocol/chain/ids.py`) every off-chain role.
library Ids {
    /// @dev The reveal phase is this part of the validate window (one quarter).
    uint256 internal constant REVEAL_SHARE = 4;

    /// @dev `taskId << 192 | round << 160 | trainer`: one submission per trainer and round.
    function submissionId(uint256 taskId, uint256 round, address trainer) internal pure returns (uint256) {
        return (taskId << 192) | (round << 160) | uint256(uint160(trainer));
    }

    /// @dev The task a submission id belongs to.
    function taskOf(uint256 id) internal pure returns (uint256) {
        return id >> 192;
    }

    /// @dev The task and round a submission id belongs to.
    function taskAndRound(uint256 id) internal pure returns (uint256 taskId, uint256 round) {
        taskId = id >> 192;
        round = (id >> 160) & type(uint32).max;
    }

    /// @dev The task, round and trainer a submission id packs.
    function decode(uint256 id) internal pure returns (uint256 taskId, uint256 round, address trainer) {
        taskId = id >> 192;
        round = (id >> 160) & type(uint32).max;
        trainer = address(uint160(id));
    }

    /// @dev What {ITaskMarket-submitWork} emits: binds this chain, the market, task, round, base round and
    ///      trainer to the proofs, so a copied commitment names its first sender and the checkpoint it used.
    function commitment(
        address market,
        uint256 taskId,
        uint256 round,
        uint256 baseRound,
        address trainer,
        bytes32 proofsDigest
    ) internal view returns (bytes32) {
        return keccak256(abi.encode(block.chainid, market, taskId, round, baseRound, trainer, proofsDigest));
    }

    /// @dev The tag a canary is submitted with: what the creator's salt opens at {ITaskMarket-revealCanary}. Bound
    ///      to the submission's id (task, round and sender), so one salt opens one canary.
    function canaryTag(bytes32 salt, uint256 id) internal pure returns (bytes12) {
        return bytes12(keccak256(abi.encode(salt, "crucible-canary", id)));
    }

    /// @dev What a validator commits to at {ITaskMarket-commitAttestation} and opens at {ITaskMarket-attest}. Bound to
    ///      the voter, so a commitment copied from another's event opens only with that other's reveal, never with
    ///      the copier's.
    function voteCommitment(uint256 id, address voter, bool valid, string calldata evidenceCid, bytes32 salt)
        internal
        pure
        returns (bytes32)
    {
        return keccak256(abi.encode(id, voter, valid, evidenceCid, salt));
    }

    /// @dev Where a round's reveal phase starts: the last quarter of its validate window (at least a second of the
    ///      contract's five-second least window; `least_windows` asks for what a chain's blocks need). Before it,
    ///      commitments; from it to the validate deadline, reveals.
    function revealFrom(uint256 validateDeadline, uint256 validateWindow) internal pure returns (uint256) {
        return validateDeadline - validateWindow / REVEAL_SHARE;
    }

    /// @dev A round's deadlines from its opening time and the task's windows: submissions until the
    ///      first, attestations until the second, disputes until the third.
    function deadlines(uint256 openedAt, uint256 submitWindow, uint256 validateWindow, uint256 challengeWindow)
        internal
        pure
        returns (uint256 submitDeadline, uint256 validateDeadline, uint256 challengeDeadline)
    {
        submitDeadline = openedAt + submitWindow;
        validateDeadline = submitDeadline + validateWindow;
        challengeDeadline = validateDeadline + challengeWindow;
    }

    /// @dev When a round may be finalised: its challenge deadline, or a challenge window after its checkpoint
    ///      was fixed (`checkpointAt`), whichever is later.
    function finalFrom(
        uint256 openedAt,
        uint256 checkpointAt,
        uint256 submitWindow,
        uint256 validateWindow,
        uint256 challengeWindow
    ) internal pure returns (uint256) {
        (,, uint256 challengeDeadline) = deadlines(openedAt, submitWindow, validateWindow, challengeWindow);
        uint256 afterCheckpoint = checkpointAt + challengeWindow;
        return afterCheckpoint > challengeDeadline ? afterCheckpoint : challengeDeadline;
    }

    /// @dev Reverts unless now is in `[opensAt, closesAt)`: one revert site for every window.
    function within(uint256 opensAt, uint256 closesAt) internal view {
        if (block.timestamp < opensAt || block.timestamp >= closesAt) {
            revert ITaskMarket.MarketOutsideWindow(block.timestamp, opensAt, closesAt);
        }
    }
}
