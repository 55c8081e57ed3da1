"""Where the protocol's randomness comes from, off chain: the RLP header of a block, which the market reads
(`contracts/src/libraries/Seeds.sol`) for its prevrandao (`mixHash`). A round's check seed and a dispute's
committee seed come from the prevrandao of a block named before it existed; its producer chooses the block's
contents (and so its hash) but not its prevrandao, so it can at most withhold the block.

The header is rebuilt from a node's `eth_getBlockByNumber` answer, field by field in the order every header
since London has them (later forks append fields: whichever the node returns are encoded), and checked
against the block's hash before it is sent: a client whose blocks do not hash to their headers is refused
here, in one line, rather than by a revert.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import rlp
from eth_abi import encode
from eth_utils import keccak

from protocol.errors import ChainError

# Header fields in RLP order, and which are integers (the rest are byte strings).
HEADER_FIELDS = (
    "parentHash",
    "sha3Uncles",
    "miner",
    "stateRoot",
    "transactionsRoot",
    "receiptsRoot",
    "logsBloom",
    "difficulty",
    "number",
    "gasLimit",
    "gasUsed",
    "timestamp",
    "extraData",
    "mixHash",
    "nonce",
    "baseFeePerGas",
    "withdrawalsRoot",
    "blobGasUsed",
    "excessBlobGas",
    "parentBeaconBlockRoot",
    "requestsHash",
)
INTEGER_FIELDS = frozenset(
    {"difficulty", "number", "gasLimit", "gasUsed", "timestamp", "baseFeePerGas", "blobGasUsed", "excessBlobGas"}
)
# How many blocks back the EVM still knows a block's hash (BLOCKHASH).
HASH_HORIZON = 256


def _bytes(value: Any) -> bytes:
    if isinstance(value, bytes):
        return value
    return bytes.fromhex(str(value).removeprefix("0x"))


def _integer(value: Any) -> int:
    return value if isinstance(value, int) else int(str(value), 16)


def header_rlp(block: Mapping[str, Any]) -> bytes:
    """The RLP-encoded header of `block` (a node's `eth_getBlockByNumber` answer), checked against its hash.
    ChainError when the node's fields do not hash to the block's hash."""
    items: list[int | bytes] = []
    for field in HEADER_FIELDS:
        if field not in block or block[field] is None:
            break
        value = block[field]
        items.append(_integer(value) if field in INTEGER_FIELDS else _bytes(value))
    encoded = rlp.encode(items)
    if keccak(encoded) != _bytes(block["hash"]):
        raise ChainError(
            f"block {_integer(block['number'])}'s header does not hash to its hash: this client's header fields "
            "are not the ones the market reads (docs/contracts.md, 'Where the seeds come from')"
        )
    return encoded


def check_seed(mix: bytes, task_id: int, round_index: int) -> bytes:
    """A round's check seed: keccak(prevrandao of its seed block, task, round, "check") (`Draws.checkSeedFrom`)."""
    return keccak(encode(["bytes32", "uint256", "uint256", "string"], [mix, task_id, round_index, "check"]))


def dispute_seed(mix: bytes, submission: int) -> bytes:
    """A dispute's committee seed: keccak(prevrandao of its seed block, id, "dispute") (`Draws.disputeSeedFrom`)."""
    return keccak(encode(["bytes32", "uint256", "string"], [mix, submission, "dispute"]))
