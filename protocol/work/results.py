"""What one check of a submission reports (`CheckResult`), shared by the checks and their evidence."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

# Failures listed in evidence per check: enough to re-check quickly, bounded in size.
MAX_LISTED = 32


@dataclass
class CheckResult:
    """One check's outcome: figures measured, thresholds applied, and where it failed."""

    check: str
    passed: bool
    figures: dict[str, Any] = field(default_factory=dict)
    thresholds: dict[str, Any] = field(default_factory=dict)
    failures: list[dict[str, Any]] = field(default_factory=list)
    reason: str = ""
    seconds: float = 0.0

    def as_json(self) -> dict[str, Any]:
        """The result as evidence JSON."""
        return {
            "check": self.check,
            "passed": self.passed,
            "reason": self.reason,
            "figures": self.figures,
            "thresholds": self.thresholds,
            "failures": self.failures[:MAX_LISTED],
            "failures_total": len(self.failures),
            "seconds": round(self.seconds, 4),
        }


def finite(value: float) -> float | str:
    """A float for JSON: infinities as strings."""
    return round(value, 6) if math.isfinite(value) else str(value)
