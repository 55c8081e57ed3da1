"""Red-team validators, for devnets and tests: the same shape as the trainer's adversaries
(`node/adversary.py`): a class per strategy with a name and a description, hooks that return what an
honest validator would when not overridden, and `adversary_of` to pick one by name."""

from __future__ import annotations

from typing import ClassVar

from protocol.runtime.participant import red_team_of
from protocol.work.checks import Verdict
from protocol.work.results import CheckResult


class ValidatorAdversary:
    """An honest validator: it runs every check of every submission it is assigned."""

    name: ClassVar[str] = "honest"
    description: ClassVar[str] = "checks every submission"
    disputes: ClassVar[bool] = True

    def verdict(self) -> Verdict | None:
        """The verdict to attest without checking; None: run the checks."""
        return None


class Lazy(ValidatorAdversary):
    name = "lazy"
    description = "attests every submission valid without checking it"
    disputes = False

    def verdict(self) -> Verdict | None:
        return Verdict([CheckResult("none", True, reason="lazy validator: not checked")])


class Liar(ValidatorAdversary):
    name = "liar"
    description = "attests every submission invalid without checking it"
    disputes = False

    def verdict(self) -> Verdict | None:
        return Verdict([CheckResult("none", False, reason="liar validator: not checked")])


ADVERSARIES: dict[str, type[ValidatorAdversary]] = {kind.name: kind for kind in (Lazy, Liar)}


def adversary_of(name: str | None) -> ValidatorAdversary | None:
    """The strategy called `name` (None for an honest validator); ConfigError for an unknown one."""
    return red_team_of(ADVERSARIES, name, "validator adversary")
