"""The JSON convention for amounts, checked over a whole document: exact base units as decimal strings in
fields named `*_wei`, and no amount under any other name (so no field is a number in one command and a
string in another)."""

from __future__ import annotations

from typing import Any

# Amount names our JSON used before the convention (and a careless change could bring back); not
# `tokens`, which in our documents counts text tokens.
BARE_AMOUNTS = {
    "amount", "balance", "bond", "bounty", "credits", "credited", "dispute_bond", "dispute_bonds", "free", "held",
    "locked", "min_trainer_stake", "min_validator_stake", "owed", "refundable", "refunded", "reward", "rewards",
    "slash", "slashed", "stake_after", "stake_before", "staked", "total_in", "total_out", "difference",
    "unbonding", "validator_slash",
}  # fmt: skip


def assert_amounts_in_wei(document: Any, path: str = "$") -> int:
    """Fails naming the field that breaks the convention; returns how many `*_wei` fields it checked (a
    caller asserts that is more than zero, so the check cannot pass vacuously). An event's `args` are the
    contract's own names, as the chain emitted them, and the explorer's `*_shown` fields are text for people;
    both are left alone."""
    checked = 0
    if isinstance(document, list):
        return sum(assert_amounts_in_wei(item, f"{path}[{i}]") for i, item in enumerate(document))
    if not isinstance(document, dict):
        return 0
    for key, value in document.items():
        where = f"{path}.{key}"
        if key == "args" or key.endswith("_shown"):
            continue
        assert key not in BARE_AMOUNTS, f"{where}: an amount outside a *_wei field ({value!r})"
        if key.endswith("_wei"):
            values = value.values() if isinstance(value, dict) else [value]
            exact = all(isinstance(v, str) and v.removeprefix("-").isdigit() for v in values)
            assert exact, f"{where}: not decimal strings: {value!r}"
            checked += 1
        else:
            checked += assert_amounts_in_wei(value, where)
    return checked
