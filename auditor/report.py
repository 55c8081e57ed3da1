"""What an audit reports: findings against others, the votes it compared, and the audit of a
submission, a round and a task, each with its JSON form (the shape `crucible audit --json` prints)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from auditor.index import Event
from auditor.money import MoneyCheck
from protocol.chain.ids import submission_text
from protocol.chain.params import TaskParams
from protocol.work.checks import Verdict


@dataclass
class Finding:
    """One thing the audit found wrong."""

    kind: str
    message: str

    def as_json(self) -> dict[str, str]:
        return {"kind": self.kind, "message": self.message}


@dataclass
class Vote:
    """An attestation or a dispute committee vote, with what its evidence says."""

    validator: str
    valid: bool
    evidence_cid: str
    purpose: str
    evidence_check: str | None = None  # the check the evidence names as failed (None: all passed)
    evidence_problem: str | None = None
    evidence_unread: str | None = None  # the auditor's own fault kept it from reading the evidence

    def as_json(self) -> dict[str, Any]:
        return {
            "validator": self.validator,
            "valid": self.valid,
            "evidence_cid": self.evidence_cid,
            "purpose": self.purpose,
            "evidence_failed_check": self.evidence_check,
            "evidence_problem": self.evidence_problem,
        }


@dataclass
class SubmissionAudit:
    """Everything known about one submission, and the auditor's own verdict."""

    submission: int
    task_id: int
    round_index: int
    trainer: str
    rollout_cid: str
    update_cid: str
    work_units: int
    block: int
    sampled: bool
    assigned: list[str]
    votes: list[Vote]
    disputed_by: str | None
    dispute_upheld: bool | None
    rejected: bool
    settled: bool
    reward_wei: int
    slashed_wei: int
    base_round: int  # the round whose checkpoint the work started from
    seed_fixed: bool = True  # False: not yet known whether it is sampled, nor by whom checked
    canary: bool = False  # revealed as a canary by the task's creator (known-bad work it planted)
    committed: list[str] = field(default_factory=list)  # validators that committed a hidden vote (commit phase)
    rerun: Verdict | None = None
    findings: list[Finding] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what the auditor could not verify, its own faults

    @property
    def outcome(self) -> str:
        return ("canary" if self.canary else "rejected") if self.rejected else "accepted"

    @property
    def unrevealed(self) -> list[str]:
        """Validators whose commitment was not (or not yet) revealed: a reveal withheld past the validate deadline
        is penalised like a wrong vote."""
        revealed = {vote.validator for vote in self.votes if vote.purpose == "attest"}
        return [validator for validator in self.committed if validator not in revealed]

    def as_json(self) -> dict[str, Any]:
        return {
            "submission": submission_text(self.submission),
            "task_id": self.task_id,
            "round": self.round_index,
            "base_round": self.base_round,
            "staleness": self.round_index - self.base_round,
            "trainer": self.trainer,
            "rollout_cid": self.rollout_cid,
            "update_cid": self.update_cid,
            "work_units": self.work_units,
            "block": self.block,
            "sampled": self.sampled,
            "assigned": self.assigned,
            "votes": [vote.as_json() for vote in self.votes],
            "committed": self.committed,
            "unrevealed": self.unrevealed,
            "disputed_by": self.disputed_by,
            "dispute_upheld": self.dispute_upheld,
            "outcome": self.outcome,
            "settled": self.settled,
            "reward_wei": str(self.reward_wei),
            "slashed_wei": str(self.slashed_wei),
            "rerun": None
            if self.rerun is None
            else {
                "valid": self.rerun.valid,
                "failed_check": self.rerun.failed_check,
                "checks": [result.as_json() for result in self.rerun.results],
            },
            "findings": [finding.as_json() for finding in self.findings],
            "notes": self.notes,
        }


@dataclass
class RoundAudit:
    """One round: its checkpoint, its submissions, the agreed next checkpoint and its recomputation."""

    task_id: int
    round_index: int
    checkpoint_cid: str
    work_seed: str
    check_seed: str | None
    finalised: bool
    submissions: list[SubmissionAudit]
    proposals: list[dict[str, str]]
    agreed_cid: str | None
    recomputed_cid: str | None = None
    # How the agreed checkpoint's outer step treated each update, as its manifest records it (None: plain mean),
    # and a line for each update it clipped or trimmed: notes, not findings (a large honest update is clipped).
    outer_step: list[dict[str, Any]] | None = None
    outer_step_notes: list[str] = field(default_factory=list)
    accuracy: tuple[float, float] | None = None  # held-out (greedy, sampled) of the round's checkpoint
    findings: list[Finding] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def all_findings(self) -> list[Finding]:
        return self.findings + [f for s in self.submissions for f in s.findings]

    def all_notes(self) -> list[str]:
        return self.notes + [note for s in self.submissions for note in s.notes]

    def as_json(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id,
            "round": self.round_index,
            "checkpoint_cid": self.checkpoint_cid,
            "work_seed": self.work_seed,
            "check_seed": self.check_seed,
            "finalised": self.finalised,
            "accuracy": None if self.accuracy is None else self.accuracy[0],
            "sampled_accuracy": None if self.accuracy is None else self.accuracy[1],
            "proposals": self.proposals,
            "agreed_cid": self.agreed_cid,
            "recomputed_cid": self.recomputed_cid,
            "outer_step": self.outer_step,
            "outer_step_notes": self.outer_step_notes,
            "submissions": [s.as_json() for s in self.submissions],
            "findings": [f.as_json() for f in self.findings],
            "notes": self.notes,
        }


@dataclass
class TaskAudit:
    """A whole task: its history, rounds, money and findings."""

    task_id: int
    creator: str
    model_cid: str
    env_cid: str
    params: TaskParams
    ended: bool
    validators: list[str]
    history: list[Event]
    rounds: list[RoundAudit]
    money: MoneyCheck
    findings: list[Finding] = field(default_factory=list)
    final_checkpoint: str | None = None
    final_accuracy: float | None = None

    def all_findings(self) -> list[Finding]:
        return self.findings + [f for r in self.rounds for f in r.all_findings()]

    def all_notes(self) -> list[str]:
        return [note for r in self.rounds for note in r.all_notes()]

    def as_json(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id,
            "creator": self.creator,
            "model_cid": self.model_cid,
            "env_cid": self.env_cid,
            "params": self.params.as_json(),
            "ended": self.ended,
            "final_checkpoint": self.final_checkpoint,
            "final_accuracy": self.final_accuracy,
            "validators": self.validators,
            "history": [event.as_json() for event in self.history],
            "rounds": [r.as_json() for r in self.rounds],
            "money_check": self.money.as_json(),
            "findings": [f.as_json() for f in self.all_findings()],
            "notes": self.all_notes(),
        }
