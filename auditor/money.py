"""The money check: a task's tokens balanced to the wei from the index's events against the market's
state, and the market's whole balance against what it owes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from auditor.index import EventIndex
from protocol.chain.client import Crucible
from protocol.errors import ConfigError

CREDIT_KINDS = (
    "trainer_reward",
    "validator_fee",
    "finder_share",
    "bond_returned",
    "committee_share",
    "canary_prize",
)


@dataclass
class MoneyCheck:
    """A task's books, in wei: what came in equals what went out plus what the market still holds."""

    bounty: int
    slashed: int
    bonds: int
    credited: dict[str, int]
    refunded: int
    held: int

    @property
    def total_in(self) -> int:
        return self.bounty + self.slashed + self.bonds

    @property
    def total_out(self) -> int:
        return sum(self.credited.values()) + self.refunded + self.held

    @property
    def balanced(self) -> bool:
        return self.total_in == self.total_out

    def as_json(self) -> dict[str, Any]:
        """The books for scripts: every amount an exact decimal string in a field named `*_wei`."""
        return {
            "balanced": self.balanced,
            "in": {
                "bounty_wei": str(self.bounty),
                "slashed_wei": str(self.slashed),
                "dispute_bonds_wei": str(self.bonds),
            },
            "out": {
                "credited_wei": {kind: str(amount) for kind, amount in self.credited.items()},
                "refunded_wei": str(self.refunded),
                "held_wei": str(self.held),
            },
            "total_in_wei": str(self.total_in),
            "total_out_wei": str(self.total_out),
            "difference_wei": str(self.total_in - self.total_out),
        }


def money_check(crucible: Crucible, index: EventIndex, task_id: int) -> MoneyCheck:
    """Balances a task's tokens to the wei: bounty + slashes + dispute bonds = credits + refunds + what the
    market still holds for it (its pool, finalised rounds' unpaid budgets, unfinalised rounds' budgets,
    open disputes' bonds). Flows come from the index's events, holdings from the contract's state."""
    created = index.events("TaskCreated", task=task_id)
    if not created:
        raise ConfigError(f"unknown task {task_id}")
    params = created[0].args["params"]
    bounty, rounds = int(params["bounty"]), int(params["rounds"])
    events = index.events(task=task_id)
    slashed = sum(int(e.args["slashed"]) for e in events if e.name in ("Settled", "ValidatorPenalised"))
    bonds = sum(int(e.args["bond"]) for e in events if e.name == "Disputed")
    credited = dict.fromkeys(CREDIT_KINDS, 0)
    for e in events:
        if e.name == "Credited":
            credited[CREDIT_KINDS[int(e.args["kind"])]] += int(e.args["amount"])
    refunded = sum(int(e.args["amount"]) for e in events if e.name == "Refunded")
    held = crucible.task(task_id).pool
    per_round = bounty // rounds
    for round_index in range(rounds):
        state = crucible.round(task_id, round_index)
        if state.finalised:
            held += state.trainer_budget_remaining + state.fee_remaining
        else:
            held += per_round if round_index < rounds - 1 else bounty - per_round * (rounds - 1)
    resolved = {e.submission for e in events if e.name == "DisputeResolved"}
    held += sum(int(e.args["bond"]) for e in events if e.name == "Disputed" and e.submission not in resolved)
    return MoneyCheck(bounty, slashed, bonds, credited, refunded, held)


def market_balance_check(crucible: Crucible, index: EventIndex) -> dict[str, Any]:
    """The market's token balance against what it owes: every task's holdings plus unclaimed credits."""
    held = 0
    for task_id in index.task_ids():
        money = money_check(crucible, index, task_id)
        held += money.held
    credited = sum(int(e.args["amount"]) for e in index.events("Credited"))
    claimed = sum(int(e.args["amount"]) for e in index.events("Claimed"))
    balance = crucible.balance_of(crucible.market.address)
    owed = held + credited - claimed
    return {"balance_wei": str(balance), "owed_wei": str(owed), "balanced": balance == owed}
