"""The node's journal: what it did in each round, written atomically, so a restart never redoes a
submission and resumes prepared work. The chain stays the authority: a round the chain shows as
submitted is submitted, whatever the journal says."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Literal

from protocol.errors import ConfigError
from protocol.files import write_json_atomic

Status = Literal["prepared", "submitted", "skipped", "settled"]


@dataclass(frozen=True)
class RoundRecord:
    """One round as the node saw it: what it prepared or sent (CIDs, work units, the proofs' digest in
    hex) and where that stands. A prepared record is also what the node submits."""

    status: Status
    rollout_cid: str = ""
    update_cid: str = ""
    work_units: int = 0
    proofs_digest: str = ""
    reason: str = ""
    # The round whose agreed checkpoint the work started from (None in journals written before pipelining:
    # the round itself).
    base_round: int | None = None

    def digest(self) -> bytes:
        """The proofs' digest as the bytes32 `submitWork` takes."""
        return bytes.fromhex(self.proofs_digest)

    def base_of(self, round_index: int) -> int:
        """The base round to submit this work on."""
        return round_index if self.base_round is None else self.base_round

    def now(self, status: Status, reason: str = "") -> RoundRecord:
        """The same work with another status."""
        return replace(self, status=status, reason=reason)


class Journal:
    """A JSON file of round records, replaced atomically on every change."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.rounds: dict[int, RoundRecord] = {}
        if path.exists():
            try:
                data = json.loads(path.read_text())
                self.rounds = {int(key): RoundRecord(**value) for key, value in data["rounds"].items()}
            except (ValueError, KeyError, TypeError) as error:
                raise ConfigError(f"node journal {path} is damaged ({error}); move it aside to start afresh") from None

    def get(self, round_index: int) -> RoundRecord | None:
        """The record of a round, if any."""
        return self.rounds.get(round_index)

    def record(self, round_index: int, record: RoundRecord) -> None:
        """Stores a round's record (atomically)."""
        self.rounds[round_index] = record
        write_json_atomic(self.path, {"rounds": {str(k): asdict(v) for k, v in sorted(self.rounds.items())}})

    def with_status(self, *statuses: Status) -> list[int]:
        """Rounds whose record has one of these statuses, in order."""
        return sorted(r for r, record in self.rounds.items() if record.status in statuses)
