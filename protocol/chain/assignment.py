"""Who checks what: the market's sampling, assignment, aggregator and committee draws, computed off
chain exactly as the contracts compute them. Line for line the twin of `contracts/src/libraries/
Draws.sol` (`isSampled`, `assignedIndices`, `aggregatorIndices`, `committeeIndices`, `draw`); change one
and change the other. A validator knows its duties from the round's check seed alone; an auditor
recomputes them; tests compare both with the views of `TaskMarketLens`, which runs the library.
"""

from __future__ import annotations

from eth_abi import encode
from eth_utils import keccak

PPM = 1_000_000


def _hash_int(types: list[str], values: list[object]) -> int:
    return int.from_bytes(keccak(encode(types, values)), "big")


def is_sampled(check_seed: bytes, submission: int, sample_rate_ppm: int) -> bool:
    """Whether the submission is spot-checked: keccak(seed, id, "sample") mod 1e6 < rate."""
    return _hash_int(["bytes32", "uint256", "string"], [check_seed, submission, "sample"]) % PPM < sample_rate_ppm


def draw(seed: bytes, n: int, count: int, excluded: list[int] | None = None) -> list[int]:
    """`count` distinct indices below `n`, none excluded, drawn from `seed` as the market draws them."""
    excluded = excluded or []
    if count == 0:
        return []
    if count > n - len(excluded):
        raise ValueError(f"cannot draw {count} of {n} with {len(excluded)} excluded")
    if n <= 2 * (count + len(excluded)):
        candidates = [i for i in range(n) if i not in excluded]
        chosen = []
        for j in range(count):
            pick = j + _hash_int(["bytes32", "uint256"], [seed, j]) % (len(candidates) - j)
            candidates[j], candidates[pick] = candidates[pick], candidates[j]
            chosen.append(candidates[j])
        return chosen
    chosen = []
    attempt = 0
    while len(chosen) < count:
        index = _hash_int(["bytes32", "uint256"], [seed, attempt]) % n
        if index not in excluded and index not in chosen:
            chosen.append(index)
        attempt += 1
    return chosen


def assigned_indices(check_seed: bytes, submission: int, validator_count: int, per_check: int) -> list[int]:
    """Indices (joining order) of the validators assigned to a sampled submission."""
    seed = keccak(encode(["bytes32", "uint256", "string"], [check_seed, submission, "assign"]))
    return draw(seed, validator_count, min(per_check, validator_count))


def aggregator_indices(check_seed: bytes, validator_count: int, per_check: int) -> list[int]:
    """Indices of the round's aggregation committee."""
    seed = keccak(encode(["bytes32", "string"], [check_seed, "aggregate"]))
    return draw(seed, validator_count, min(per_check, validator_count))


def committee_indices(
    check_seed: bytes, dispute_seed: bytes, submission: int, validator_count: int, per_check: int, sample_rate_ppm: int
) -> list[int]:
    """Indices of a dispute's committee: none of the submission's assigned validators."""
    excluded = (
        assigned_indices(check_seed, submission, validator_count, per_check)
        if is_sampled(check_seed, submission, sample_rate_ppm)
        else []
    )
    return draw(dispute_seed, validator_count, min(per_check, validator_count - len(excluded)), excluded)


def dispute_seed(filed_block_hash: bytes, submission: int) -> bytes:
    """A dispute's committee seed: keccak(hash of the block that included the dispute, id, "dispute")."""
    return keccak(encode(["bytes32", "uint256", "string"], [filed_block_hash, submission, "dispute"]))
