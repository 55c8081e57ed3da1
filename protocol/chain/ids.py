"""Identifiers and commitments computed exactly as the contracts compute them."""

from __future__ import annotations

from collections.abc import Iterable

from eth_abi import encode
from eth_utils import keccak, to_checksum_address

from protocol.errors import ConfigError

ROUND_MASK = 2**32 - 1


def submission_id(task_id: int, round_index: int, trainer: str) -> int:
    """Returns `taskId << 192 | round << 160 | trainer`, the market's submission id."""
    return (task_id << 192) | (round_index << 160) | int(trainer, 16)


def submission_text(submission: int) -> str:
    """A submission id as people read it, everywhere: 0x-hex, which shows its task, round and trainer
    (`parse_submission_id` takes it back, as it takes decimal)."""
    return hex(submission)


def parse_submission_id(text: str) -> int:
    """A submission id typed by a person, in decimal or 0x hex; ConfigError naming it when malformed or
    not a positive uint256."""
    shown = text[:80]
    try:
        value = int(text, 16) if text.lower().startswith("0x") else int(text, 10)
    except ValueError:
        raise ConfigError(f"malformed submission id {shown!r}: a decimal or 0x-hex number") from None
    if not 0 < value < 2**256:
        raise ConfigError(f"submission id {shown} is out of range")
    return value


def decode_submission_id(value: int) -> tuple[int, int, str]:
    """Returns (task id, round, trainer address) of a submission id."""
    return value >> 192, (value >> 160) & ROUND_MASK, to_checksum_address(f"0x{value & (2**160 - 1):040x}")


def commitment(
    chain_id: int, market: str, task_id: int, round_index: int, base_round: int, trainer: str, proofs_digest: bytes
) -> bytes:
    """Returns the commitment `submitWork` emits: it binds chain, contract, task, round, the base round (whose
    checkpoint the work started from) and trainer to the proofs."""
    return keccak(
        encode(
            ["uint256", "address", "uint256", "uint256", "uint256", "address", "bytes32"],
            [chain_id, market, task_id, round_index, base_round, trainer, proofs_digest],
        )
    )


def canary_tag(salt: bytes, submission: int) -> bytes:
    """The tag a canary is submitted with (`Ids.canaryTag`, in the first 12 of its 32 bytes; the rest is random),
    so that only the salt's holder can reveal it, and only as the submission it was made for."""
    head = keccak(encode(["bytes32", "string", "uint256"], [salt, "crucible-canary", submission]))[:12]
    return head + keccak(salt + b"rest")[:20]


REVEAL_SHARE = 4  # Ids.REVEAL_SHARE: the reveal phase is the validate window's last quarter


def vote_commitment(submission: int, voter: str, valid: bool, evidence_cid: str, salt: bytes) -> bytes:
    """What a validator commits to before revealing its vote (`Ids.voteCommitment`): bound to the voter, so a
    commitment copied from another's event opens only with that other's reveal."""
    types = ["uint256", "address", "bool", "string", "bytes32"]
    return keccak(encode(types, [submission, voter, valid, evidence_cid, salt]))


def reveal_from(validate_deadline: int, validate_window: int) -> int:
    """Where a round's reveal phase starts (`Ids.revealFrom`): commitments before, reveals from here to the
    validate deadline."""
    return validate_deadline - validate_window // REVEAL_SHARE


def checkpoint_digests(model_cid: str, agreed_cids: Iterable[str]) -> dict[bytes, str]:
    """The CIDs a task's rounds can open on (its first model, then every agreed checkpoint) by the
    digest the market stores for a round's checkpoint: keccak256 of the CID's text."""
    return {keccak(text=cid): cid for cid in [model_cid, *agreed_cids]}
