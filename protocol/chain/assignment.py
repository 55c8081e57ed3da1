"""Who checks what: the market's sampling, assignment, aggregator and committee draws, computed off
chain exactly as the contracts compute them. Line for line the twin of `contracts/src/libraries/
Draws.sol` (`isSampled`, `assigned`, `aggregators`, `positions`, `bitsWithin`) and of the market's
holder search; change one and change the other. A validator knows its duties from the round's check
seed, its seat stake and the members' ranges alone; an auditor recomputes them; tests compare both with
the views of `TaskMarketLens`, which runs the library.

Every committee is `per_check` positions, each drawn on its own, uniformly over the round's seat stake
`[0, total)`; a position belongs to the member whose range holds it. One validator may hold several
positions of one committee and votes them all with one transaction.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass

from eth_abi import encode
from eth_utils import keccak

PPM = 1_000_000


@dataclass(frozen=True)
class Member:
    """`ITaskMarket.Member`: a validator in joining order and where its range of seat stake starts."""

    account: str
    start: int


def _hash_int(types: list[str], values: list[object]) -> int:
    return int.from_bytes(keccak(encode(types, values)), "big")


def is_sampled(check_seed: bytes, submission: int, sample_rate_ppm: int) -> bool:
    """Whether the submission is spot-checked: keccak(seed, id, "sample") mod 1e6 < rate."""
    return _hash_int(["bytes32", "uint256", "string"], [check_seed, submission, "sample"]) % PPM < sample_rate_ppm


def positions(seed: bytes, total: int, count: int) -> list[int]:
    """`count` positions below `total`: position j is keccak(seed, j) mod total."""
    return [_hash_int(["bytes32", "uint256"], [seed, j]) % total for j in range(count)]


def assigned_positions(check_seed: bytes, submission: int, seat_stake: int, per_check: int) -> list[int]:
    """Positions of the validators assigned to a sampled submission."""
    seed = keccak(encode(["bytes32", "uint256", "string"], [check_seed, submission, "assign"]))
    return positions(seed, seat_stake, per_check)


def aggregator_positions(check_seed: bytes, seat_stake: int, per_check: int) -> list[int]:
    """Positions of the round's aggregation committee."""
    return positions(keccak(encode(["bytes32", "string"], [check_seed, "aggregate"])), seat_stake, per_check)


def committee_positions(dispute_seed: bytes, seat_stake: int, per_check: int) -> list[int]:
    """Positions of a dispute's committee (`Draws.committee`): `per_check` drawn over the round's whole seat
    stake from the dispute's seed, like every other committee (the validators who checked the submission are
    drawn like anyone else). A verdict needs more than half of all of them."""
    return positions(dispute_seed, seat_stake, per_check)


def bits_within(drawn: list[int], start: int, stake: int) -> int:
    """The bits of the positions in `[start, start + stake)`: those a seat with that range holds."""
    return sum(1 << j for j, position in enumerate(drawn) if start <= position < start + stake)


def holders(members: list[Member], drawn: list[int]) -> list[str]:
    """The validator holding each drawn position: the last member whose range starts at or below it."""
    starts = [member.start for member in members]
    return [members[bisect_right(starts, position) - 1].account for position in drawn]
