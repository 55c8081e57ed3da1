// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

/// @title Draws
/// @notice Who checks what: the sampling, assignment, aggregator and dispute-committee draws from a
///         round's check seed. Line for line the twin of `protocol/chain/assignment.py`, which
///         validators and auditors run off chain; change one and change the other (the Python
///         tests compare both on the same seeds).
library Draws {
    uint256 internal constant PPM = 1_000_000;

    // Sampling and assignment draw from chain randomness fixed after every submission was sent,
    // the protocol's stated source (docs/contracts.md discusses its bias); nothing better is on chain.
    /// @dev Whether the submission is spot-checked: keccak(seed, id, "sample") mod 1e6 < rate.
    // slither-disable-next-line weak-prng
    function isSampled(bytes32 checkSeed, uint256 submissionId, uint256 sampleRatePpm) internal pure returns (bool) {
        return uint256(keccak256(abi.encode(checkSeed, submissionId, "sample"))) % PPM < sampleRatePpm;
    }

    /// @dev Indices (joining order) of the validators assigned to a sampled submission.
    function assignedIndices(bytes32 checkSeed, uint256 submissionId, uint256 validatorCount, uint256 perCheck)
        internal
        pure
        returns (uint256[] memory)
    {
        return draw(
            keccak256(abi.encode(checkSeed, submissionId, "assign")),
            validatorCount,
            min(perCheck, validatorCount),
            new uint256[](0)
        );
    }

    /// @dev Indices of the round's aggregation committee.
    function aggregatorIndices(bytes32 checkSeed, uint256 validatorCount, uint256 perCheck)
        internal
        pure
        returns (uint256[] memory)
    {
        return draw(
            keccak256(abi.encode(checkSeed, "aggregate")),
            validatorCount,
            min(perCheck, validatorCount),
            new uint256[](0)
        );
    }

    /// @dev Indices of a dispute's committee: up to `perCheck` validators of the round, none of
    ///      those assigned to the submission.
    function committeeIndices(
        bytes32 checkSeed,
        bytes32 disputeSeed,
        uint256 submissionId,
        uint256 validatorCount,
        uint256 perCheck,
        uint256 sampleRatePpm
    ) internal pure returns (uint256[] memory) {
        uint256[] memory excluded = isSampled(checkSeed, submissionId, sampleRatePpm)
            ? assignedIndices(checkSeed, submissionId, validatorCount, perCheck)
            : new uint256[](0);
        return draw(disputeSeed, validatorCount, min(perCheck, validatorCount - excluded.length), excluded);
    }

    /// @dev A dispute's committee seed: keccak(hash of the block that included the dispute, id,
    ///      "dispute"), a hash the disputer could not know when it filed.
    function disputeSeed(bytes32 filedHash, uint256 submissionId) internal pure returns (bytes32) {
        return keccak256(abi.encode(filedHash, submissionId, "dispute"));
    }

    /// @dev `count` distinct indices below `n`, none in `excluded`, from `seed`. Requires
    ///      count <= n - excluded.length. When the draw takes a large part of the set
    ///      (n <= 2 * (count + excluded), so n <= 64), the candidates are shuffled (Fisher-Yates);
    ///      otherwise indices are drawn with rejection, and each attempt succeeds with probability
    ///      at least 1/2. Either way the cost does not grow with the validator count past 64.
    function draw(bytes32 seed, uint256 n, uint256 count, uint256[] memory excluded)
        internal
        pure
        returns (uint256[] memory chosen)
    {
        chosen = new uint256[](count);
        if (count == 0) return chosen;
        if (n <= 2 * (count + excluded.length)) {
            uint256[] memory candidates = new uint256[](n);
            uint256 m = 0;
            for (uint256 i = 0; i < n; ++i) {
                if (!contains(excluded, excluded.length, i)) candidates[m++] = i;
            }
            for (uint256 j = 0; j < count; ++j) {
                // slither-disable-next-line weak-prng
                uint256 r = j + uint256(keccak256(abi.encode(seed, j))) % (m - j);
                (candidates[j], candidates[r]) = (candidates[r], candidates[j]);
                chosen[j] = candidates[j];
            }
            return chosen;
        }
        uint256 filled = 0;
        for (uint256 attempt = 0; filled < count; ++attempt) {
            // slither-disable-next-line weak-prng
            uint256 index = uint256(keccak256(abi.encode(seed, attempt))) % n;
            if (!contains(excluded, excluded.length, index) && !contains(chosen, filled, index)) {
                chosen[filled++] = index;
            }
        }
    }

    /// @dev Whether `value` is among the first `length` entries of `values`.
    function contains(uint256[] memory values, uint256 length, uint256 value) internal pure returns (bool) {
        for (uint256 i = 0; i < length; ++i) {
            // slither-disable-next-line incorrect-equality
            if (values[i] == value) return true;
        }
        return false;
    }

    /// @dev The bit of the caller's position among `indices`, or zero when it is not there.
    ///      `slot` is the caller's validator index plus one (zero: not a validator of the task).
    function slotBit(uint256[] memory indices, uint256 slot) internal pure returns (uint256) {
        if (slot == 0) return 0;
        for (uint256 j = 0; j < indices.length; ++j) {
            if (indices[j] == slot - 1) return 1 << j;
        }
        return 0;
    }

    /// @dev The number of set bits.
    function popcount(uint256 mask) internal pure returns (uint256 count) {
        while (mask != 0) {
            mask &= mask - 1;
            ++count;
        }
    }

    function min(uint256 a, uint256 b) internal pure returns (uint256) {
        return a < b ? a : b;
    }
}
