// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

/// @title Draws
/// @notice Who checks what: the sampling, assignment, aggregator and dispute-committee draws from a
///         round's check seed. Line for line the twin of `protocol/chain/assignment.py`, which
///         validators and auditors run off chain; change one and change the other (the Python
///         tests compare both on the same seeds).
/// @dev Every committee is `perCheck` positions, each drawn on its own, uniformly over the round's
///      seat stake `[0, total)`; a position belongs to the validator whose seat range holds it. So
///      a validator's chance at each position is its share of the seat stake, one operator's number
///      of positions has the same distribution however it splits its stake over addresses, and each
///      position is a colluder's with chance exactly the colluders' share (the deterrence check's
///      model, {Params-honestMajority}). A validator may hold several positions of one committee and
///      votes them all at once.
library Draws {
    uint256 internal constant PPM = 1_000_000;

    // Sampling and assignment draw from a prevrandao fixed after every submission was sent ({Seeds}).
    /// @dev Whether the submission is spot-checked: keccak(seed, id, "sample") mod 1e6 < rate.
    // slither-disable-next-line weak-prng
    function isSampled(bytes32 checkSeed, uint256 submissionId, uint256 sampleRatePpm) internal pure returns (bool) {
        return uint256(keccak256(abi.encode(checkSeed, submissionId, "sample"))) % PPM < sampleRatePpm;
    }

    /// @dev Positions of the validators assigned to a sampled submission.
    function assigned(bytes32 checkSeed, uint256 submissionId, uint256 total, uint256 perCheck)
        internal
        pure
        returns (uint256[] memory)
    {
        return positions(keccak256(abi.encode(checkSeed, submissionId, "assign")), total, perCheck);
    }

    /// @dev Positions of the round's aggregation committee.
    function aggregators(bytes32 checkSeed, uint256 total, uint256 perCheck) internal pure returns (uint256[] memory) {
        return positions(keccak256(abi.encode(checkSeed, "aggregate")), total, perCheck);
    }

    /// @dev A round's check seed: keccak(prevrandao of the round's seed block, task, round, "check").
    function checkSeedFrom(bytes32 mix, uint256 taskId, uint256 round) internal pure returns (bytes32) {
        return keccak256(abi.encode(mix, taskId, round, "check"));
    }

    /// @dev A dispute's committee seed: keccak(prevrandao of the dispute's seed block, id, "dispute"), a block
    ///      named when the dispute was filed, before it existed.
    function disputeSeedFrom(bytes32 mix, uint256 submissionId) internal pure returns (bytes32) {
        return keccak256(abi.encode(mix, submissionId, "dispute"));
    }

    /// @dev A dispute committee's positions: `perCheck` drawn over the round's whole seat stake, like every
    ///      other committee. The validators who checked the submission are drawn like anyone else (their
    ///      positions are a fair sample of the stake too); what they cannot do is shrink the stake the
    ///      committee comes from, as excluding them once did.
    function committee(bytes32 disputeSeed, uint256 total, uint256 perCheck) internal pure returns (uint256[] memory) {
        return positions(disputeSeed, total, perCheck);
    }

    /// @dev `count` positions below `total`: position j is keccak(seed, j) mod total. The modulo's bias
    ///      is below total / 2^256 (seat stake fits in 96 bits). Cost: one hash per position.
    // slither-disable-next-line weak-prng
    function positions(bytes32 seed, uint256 total, uint256 count) internal pure returns (uint256[] memory drawn) {
        drawn = new uint256[](count);
        for (uint256 j = 0; j < count; ++j) {
            drawn[j] = uint256(keccak256(abi.encode(seed, j))) % total;
        }
    }

    /// @dev The bits of the positions in `[from, from + stake)`: those a seat with that range holds.
    function bitsWithin(uint256[] memory drawn, uint256 from, uint256 stake) internal pure returns (uint256 bits) {
        for (uint256 j = 0; j < drawn.length; ++j) {
            if (drawn[j] >= from && drawn[j] - from < stake) bits |= 1 << j;
        }
    }

    /// @dev The number of set bits.
    function popcount(uint256 mask) internal pure returns (uint256 count) {
        while (mask != 0) {
            mask &= mask - 1;
            ++count;
        }
    }
}
