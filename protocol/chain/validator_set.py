"""Who holds a task's seat stake, beside the colluding share the task declares.

The deterrence rule assumes that at most the declared share `c` of the seat stake votes with a cheat, however it
is split over addresses. No contract can tell operators apart, but one address holding more than `c` alone breaks
that assumption in plain sight: it wins most committees, and the task's deterrence figure no longer holds. The
plan, `task create` and the roles show the largest holders and say so.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from protocol.chain.client import Crucible, Role
from protocol.chain.params import PPM

SHOWN = 3  # holders named in the one-line summary


@dataclass(frozen=True)
class Holder:
    """One address's seat stake (or, before a task exists, the stake it could seat)."""

    address: str
    stake_wei: int


@dataclass(frozen=True)
class ValidatorSet:
    """Seat holders, largest first, and the colluding share (per million) the task's deterrence assumes."""

    holders: tuple[Holder, ...]
    colluding_share_ppm: int

    @classmethod
    def of(cls, stakes: Mapping[str, int], colluding_share_ppm: int) -> ValidatorSet:
        """The set of `stakes` (address → stake), holders with no stake left out."""
        ordered = sorted(((a, s) for a, s in stakes.items() if s > 0), key=lambda item: (-item[1], item[0].lower()))
        return cls(tuple(Holder(a, s) for a, s in ordered), colluding_share_ppm)

    @property
    def total_wei(self) -> int:
        return sum(holder.stake_wei for holder in self.holders)

    def share(self, holder: Holder) -> float:
        """`holder`'s share of the set's stake."""
        return holder.stake_wei / self.total_wei

    @property
    def one_exceeds(self) -> bool:
        """Whether the largest holder alone holds more than the declared colluding share (exact, in integers)."""
        return bool(self.holders) and self.holders[0].stake_wei * PPM > self.colluding_share_ppm * self.total_wei

    def line(self, what: str) -> str:
        """One line: the largest holders' shares beside the declared share, and a warning when one exceeds it."""
        declared = f"the task assumes at most {self.colluding_share_ppm / PPM:.1%} of it colludes"
        if not self.holders:
            return f"validator set: no {what} yet; {declared}"
        shown = ", ".join(f"{h.address} {self.share(h):.1%}" for h in self.holders[:SHOWN])
        more = f" and {len(self.holders) - SHOWN} more" if len(self.holders) > SHOWN else ""
        text = f"validator set: {len(self.holders)} {what}, the largest {shown}{more}; {declared}"
        if self.one_exceeds:
            text += (
                f"; WARNING: {self.holders[0].address} alone holds more than that, so it wins most "
                "checks and appeals and the deterrence figure does not hold"
            )
        return text

    def as_json(self) -> dict[str, Any]:
        return {
            "holders": [
                {"address": h.address, "stake_wei": str(h.stake_wei), "share": round(self.share(h), 6)}
                for h in self.holders
            ],
            "colluding_share": self.colluding_share_ppm / PPM,
            "one_address_exceeds": self.one_exceeds,
        }


def seated_set(crucible: Crucible, task_id: int, colluding_share_ppm: int) -> ValidatorSet:
    """A task's seat holders by the seat stake each holds in its draws (a benched seat holds none)."""
    stakes: dict[str, int] = {}
    for member in crucible.members_of(task_id):
        seat = crucible.seat_of(task_id, member.account)
        stakes[member.account] = 0 if seat.benched else seat.stake
    return ValidatorSet.of(stakes, colluding_share_ppm)


def prospective_set(crucible: Crucible, min_validator_stake_wei: int, colluding_share_ppm: int) -> ValidatorSet:
    """Before a task exists: the validators staked enough to join it, each by the free stake it could seat."""
    stakes: dict[str, int] = {}
    for address in {str(event["operator"]) for event in crucible.events("StakeManager", "Staked")}:
        account = crucible.stake_account(address)
        if account.role == Role.VALIDATOR and account.free >= min_validator_stake_wei:
            stakes[address] = account.free
    return ValidatorSet.of(stakes, colluding_share_ppm)
