// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {ITaskMarket} from "../interfaces/ITaskMarket.sol";

/// @title Seeds
/// @notice Where the protocol's randomness comes from: the prevrandao (`mixHash`, header field 13) of a block
///         named before it exists, read from that block's RLP header, which must hash to the block's hash.
///         A block's producer chooses its contents, and so its hash, at will; its prevrandao it cannot choose
///         (on Ethereum it is the beacon chain's RANDAO mix, fixed by the proposer's signature: the proposer can
///         only withhold the block). So no one party picks a seed among more than two outcomes: the block, or
///         no block. docs/contracts.md says what this rests on, on L1 and on an L2. An external library
///         (linked at deployment), so the market and the dispute module share one copy of the parser.
///         Twin of `protocol/chain/seeds.py`, which builds the header from a node's block.
library Seeds {
    /// @dev Blocks between a seed's request and the block whose prevrandao becomes the seed.
    uint256 internal constant DELAY = 2;

    /// @dev RLP header field indices (every Ethereum header since London starts with these, in this order).
    uint256 private constant NUMBER_FIELD = 8;
    uint256 private constant MIX_FIELD = 13;

    /// @notice The number and prevrandao of the block `header` encodes. Reverts with `MarketWrongHeader` unless
    ///         `header` hashes to that block's hash, which the chain still knows (the last 256 blocks).
    function read(bytes calldata header) external view returns (uint256 number, bytes32 mix) {
        uint256 at = _listPayload(header);
        for (uint256 i = 0; i < NUMBER_FIELD; ++i) {
            at = _next(header, at);
        }
        (uint256 start, uint256 end) = _string(header, at);
        if (end - start > 32) revert ITaskMarket.MarketWrongHeader(0);
        number = end == start ? 0 : uint256(bytes32(header[start:end])) >> (256 - 8 * (end - start));
        for (uint256 i = NUMBER_FIELD; i < MIX_FIELD; ++i) {
            at = _next(header, at);
        }
        (start, end) = _string(header, at);
        bytes32 hash = blockhash(number);
        if (end - start != 32 || hash == 0 || keccak256(header) != hash) revert ITaskMarket.MarketWrongHeader(number);
        mix = bytes32(header[start:end]);
    }

    /// @dev Where the header list's first item starts.
    function _listPayload(bytes calldata header) private pure returns (uint256) {
        if (header.length == 0) revert ITaskMarket.MarketWrongHeader(0);
        uint8 prefix = uint8(header[0]);
        if (prefix < 0xc0) revert ITaskMarket.MarketWrongHeader(0);
        return prefix < 0xf8 ? 1 : 1 + prefix - 0xf7;
    }

    /// @dev The bounds of the RLP string at `at` (header fields are strings, never lists).
    function _string(bytes calldata header, uint256 at) private pure returns (uint256 start, uint256 end) {
        uint8 prefix = uint8(header[at]);
        if (prefix < 0x80) return (at, at + 1);
        if (prefix < 0xb8) return (at + 1, at + 1 + prefix - 0x80);
        if (prefix >= 0xc0) revert ITaskMarket.MarketWrongHeader(0);
        uint256 lengthBytes = prefix - 0xb7;
        start = at + 1 + lengthBytes;
        end = start + (uint256(bytes32(header[at + 1:start])) >> (256 - 8 * lengthBytes));
    }

    /// @dev Where the item after the one at `at` starts.
    function _next(bytes calldata header, uint256 at) private pure returns (uint256 next) {
        (, next) = _string(header, at);
    }
}
