"""The validator's loop: join the task, then each round check the submissions the check seed assigns
to it, store evidence, commit to each verdict and reveal it in the reveal phase; propose the round's
aggregate when drawn; vote on disputes when drawn; dispute an acceptance it found invalid; keep rounds
moving; settle and claim its fees.

Every duty is read from the chain on each pass, so a restarted validator resumes from the chain's
state: it commits only when the chain shows no commitment of its own and reveals only when it shows no
reveal, and an assignment still within its window is picked up again. A journal keeps verdicts already
computed (their evidence CIDs, and the salts their commitments hide them with) so that a restart does
not redo the work and can open what it committed to.
"""

from __future__ import annotations

import json
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from protocol.accounts import Signer
from protocol.artifacts.backends import describe_store
from protocol.artifacts.store import Store
from protocol.chain.assignment import aggregator_positions, assigned_positions, bits_within, is_sampled
from protocol.chain.client import Crucible, Deadlines, Role, SubmissionState
from protocol.chain.ids import submission_id
from protocol.errors import ConfigError, OwnFault, UnspokenVersion
from protocol.files import write_json_atomic
from protocol.ml.aggregation import load_included_updates, publish_next_checkpoint
from protocol.ml.envs.spec import EnvSpec
from protocol.ml.model import ModelCache
from protocol.runtime.participant import Participant
from protocol.runtime.reporter import Reporter
from protocol.values import format_tokens
from protocol.work.checks import Claim, Verdict, claim_of, stored_artifacts, verify_submission
from protocol.work.evidence import evidence_bytes, evidence_document
from protocol.work.round import RoundContext
from validator.adversary import ValidatorAdversary

# Red-team validators for devnets: they attest without checking.
# A check the validator could not run for a fault of its own is tried again after this pause, doubled
# each time up to the cap, until the next try could not land before the window closes: then it abstains.
RETRY_FIRST_S = 2.0
RETRY_MAX_S = 30.0
# Why a validator stops: a slash left it below the task's minimum stake (`ValidatorBenched`); the market
# refuses its votes from then on.
BENCHED = "was slashed below the minimum validator stake and lost its seat in task"


@dataclass
class ValidatorOptions:
    """How the validator runs."""

    task_id: int
    rounds: int | None = None
    device: str = "cpu"
    poll_s: float = 1.0
    adversary: ValidatorAdversary | None = None
    force_adversary: bool = False
    dispute: bool = True
    seat_stake_wei: int | None = None  # what joining locks (None: the task's minimum)


@dataclass
class ValidatorSummary:
    """What a run did."""

    attested: dict[str, bool] = field(default_factory=dict)
    proposed: list[int] = field(default_factory=list)
    disputed: list[str] = field(default_factory=list)
    dispute_votes: dict[str, bool] = field(default_factory=dict)
    abstained: dict[str, str] = field(default_factory=dict)
    claimed_wei: int = 0


@dataclass
class _Retry:
    """When a check that failed for the validator's own fault is tried again."""

    pause_s: float
    next_at: float
    reason: str  # the own fault that put it off


_SALT_KEYS = {"attest": "salt", "dispute": "dispute_salt"}


class VerdictJournal:
    """Verdicts this validator computed (submission → valid, evidence CID, failed check), kept atomically."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.entries: dict[str, dict[str, Any]] = {}
        if path.exists():
            try:
                self.entries = dict(json.loads(path.read_text())["verdicts"])
            except (ValueError, KeyError, TypeError) as error:
                raise ConfigError(f"validator journal {path} is damaged ({error}); move it aside") from None

    def get(self, submission: int) -> dict[str, Any] | None:
        """The stored verdict of a submission."""
        return self.entries.get(str(submission))

    def record(self, submission: int, valid: bool, evidence_cid: str, failed_check: str | None) -> None:
        """Stores a verdict (atomically)."""
        self.entries[str(submission)] = {"valid": valid, "evidence_cid": evidence_cid, "failed_check": failed_check}
        write_json_atomic(self.path, {"verdicts": self.entries})

    def salt(self, submission: int, purpose: str = "attest") -> bytes:
        """The secret its commitment to the submission's verdict is made with, one per purpose ("attest", "dispute":
        a revealed attestation's salt must not open its dispute vote early): drawn once and stored (atomically)
        before the commitment is sent, so a restart reveals what it committed to."""
        entry, key = self.entries[str(submission)], _SALT_KEYS[purpose]
        if key not in entry:
            entry[key] = secrets.token_bytes(32).hex()
            write_json_atomic(self.path, {"verdicts": self.entries})
        return bytes.fromhex(entry[key])

    def stored_salt(self, submission: int, purpose: str) -> bytes | None:
        """The salt stored for `purpose`, None when the journal has none (lost, or never committed)."""
        entry = self.entries.get(str(submission)) or {}
        key = _SALT_KEYS[purpose]
        return bytes.fromhex(entry[key]) if key in entry else None


class Validator(Participant):
    """One validator identity working on one task."""

    def __init__(
        self, crucible: Crucible, signer: Signer, store: Store, options: ValidatorOptions, reporter: Reporter
    ) -> None:
        super().__init__(crucible, signer, store, reporter, options.task_id)
        self.options = options
        self.journal = VerdictJournal(self.state_file("validator"))
        self.summary = ValidatorSummary()
        self.models = ModelCache(self.store, options.device)
        self._proposals: dict[tuple[int, tuple[int, ...]], str] = {}
        self._seen_rounds: set[int] = set()
        self._closed_rounds: set[int] = set()  # final and every submission settled: nothing left to do
        self._retries: dict[int, _Retry] = {}
        self.unspoken = ""  # why it cannot judge this task's work (its protocol version), when it cannot

    # ------------------------------------------------------------ start

    def check_ready(self) -> EnvSpec | None:
        """Refuses to start when the validator cannot take part; joins the task when not yet joined. None: seated
        in a task whose protocol version it does not speak (it abstains from its checks)."""
        adversary = self.options.adversary
        self.refuse_red_team_off_devnet(adversary.name if adversary else None, self.options.force_adversary)
        task_id = self.options.task_id
        task = self.crucible.task(task_id)
        if task.ended:
            raise ConfigError(f"task {task_id} has ended")
        seat = self.crucible.seat_of(task_id, self.address)
        joined = seat.slot != 0  # validators leave only ended tasks, refused above
        if seat.benched:
            raise ConfigError(f"{self.address} {BENCHED} {task_id}")
        seat_stake = task.min_validator_stake if self.options.seat_stake_wei is None else self.options.seat_stake_wei
        if not joined and seat_stake < task.min_validator_stake:
            decimals, symbol = self.crucible.decimals, self.crucible.symbol
            raise ConfigError(
                f"--seat-stake {format_tokens(seat_stake, decimals, symbol)} is below task {task_id}'s minimum "
                f"validator stake, {format_tokens(task.min_validator_stake, decimals, symbol)} (nothing sent)"
            )
        self.check_stake(Role.VALIDATOR, None if joined else seat_stake)
        try:
            spec: EnvSpec | None = self.task_spec()
        except UnspokenVersion as error:
            if not joined:
                raise  # before joining: nothing sent
            # Seated already (it joined under software that spoke the task's version): it cannot judge the
            # task's work as the task means it, so it never votes on it; it still keeps rounds moving and
            # settles and claims what it earned before.
            spec, self.unspoken = None, str(error)
            self.reporter.event("warning", task=task_id, reason=f"{error}; seated, it abstains from every check")
        if not joined:
            self.crucible.join_task(self.signer, task_id, seat_stake)
            self.reporter.event("joined", task=task_id, seat_stake_wei=str(seat_stake))
        self.report_validator_set()
        return spec

    # ------------------------------------------------------------ loop

    def run(self) -> ValidatorSummary:
        """Does its duties until `rounds` rounds it saw are final, or the task ended."""
        spec = self.check_ready()
        task_id = self.options.task_id
        self.warn_if_unchecked()
        self.reporter.event(
            "started",
            task=task_id,
            validator=self.address,
            adversary=self.options.adversary.name if self.options.adversary else None,
            store=describe_store(self.store),
        )

        def one_pass() -> bool:
            if self.crucible.seat_of(task_id, self.address).benched:
                self.reporter.event("benched", task=task_id, reason=f"{BENCHED} {task_id}")
                return True
            task = self.crucible.task(task_id)
            self._seen_rounds.update(self.crucible.live_rounds(task))
            for round_index in sorted(self._seen_rounds - self._closed_rounds):
                self._duties(round_index, spec)
            self._claim()
            return task.ended or self._rounds_done()

        self.poll_until(one_pass, self.options.poll_s)
        self._claim()
        self.reporter.event(
            "finished",
            attested=len(self.summary.attested),
            abstained=len(self.summary.abstained),
            proposed_rounds=self.summary.proposed,
            disputed=self.summary.disputed,
            claimed_wei=str(self.summary.claimed_wei),
            fees=self.crucible.chain.fees.as_json(),
        )
        return self.summary

    def _rounds_done(self) -> bool:
        return self.options.rounds is not None and len(self._closed_rounds) >= self.options.rounds

    def _duties(self, round_index: int, spec: EnvSpec | None) -> None:
        task_id = self.options.task_id
        state = self.crucible.round(task_id, round_index)
        deadlines = self.crucible.deadlines(task_id, round_index)
        now = self.crucible.chain.now()
        try:
            # Each step that sends catches its own lost race; this one also covers the views read between
            # them, which can revert with a race's error when the round moved on meanwhile.
            with self.racing("round_duties", round=round_index):
                if state.finalised:
                    self._settle(round_index)
                    if self._settled(round_index):
                        self._closed_rounds.add(round_index)
                    return
                if deadlines.submit <= now < deadlines.validate:
                    if self.keep_round(round_index, state, deadlines, now):  # it fixed the check seed
                        state = self.crucible.round(task_id, round_index)
                    self._attest_assigned(round_index, state.check_seed, state.seat_stake, deadlines, spec)
                elif now >= deadlines.validate:
                    if spec is not None:  # a version it does not speak: no committee vote, no proposal
                        self._dispute_duties(round_index, spec)
                        self._propose(round_index, spec)
                    self.keep_round(round_index, state, deadlines, now)
        except OwnFault as error:
            # Its own disk or network failed it (an update to aggregate, a checkpoint): the next pass retries.
            self.reporter.event("own_fault", round=round_index, reason=str(error))

    # ------------------------------------------------------------ attestations

    def _my_range(self, seat_stake: int) -> tuple[int, int] | None:
        """Its range of seat stake in a round whose draws share out `seat_stake`: None when it joined after
        the round's snapshot (its range starts past it) or holds nothing."""
        seat = self.crucible.seat_of(self.options.task_id, self.address)
        if seat.stake == 0 or seat.seat_from >= seat_stake:
            return None
        return seat.seat_from, seat.stake

    def _attest_assigned(
        self, round_index: int, check_seed: bytes, seat_stake: int, deadlines: Deadlines, spec: EnvSpec | None
    ) -> None:
        """Its votes on the round's checks it holds positions of: in the commit phase it checks each and commits to
        the verdict (hidden: nobody's vote is public before the reveal phase, so none can be copied); in the reveal
        phase it reveals each commitment (one withheld is penalised like a wrong vote)."""
        if check_seed == bytes(32):
            return
        mine = self._my_range(seat_stake)
        if mine is None:
            return
        task = self.crucible.task(self.options.task_id)
        revealing = self.crucible.chain.now() >= deadlines.votes_revealed_from
        duties = []
        for event in self.crucible.submissions(self.options.task_id, round_index):
            submission = self._submission_id(event)
            if not is_sampled(check_seed, submission, task.sample_rate_ppm):
                continue
            drawn = assigned_positions(check_seed, submission, seat_stake, task.validators_per_check)
            if not bits_within(drawn, *mine) or str(submission) in self.summary.abstained:
                continue
            committed = self._voted("AttestationCommitted", submission)
            if revealing:
                if committed and not self._voted("Attested", submission):
                    self._reveal(round_index, submission, deadlines.validate)
                elif not committed and submission in self._retries:  # its own fault outlasted the commit phase
                    self._abstain(submission, f"could not verify: {self._retries[submission].reason}")
            elif committed:
                continue
            elif self._due(submission):
                duties.append((submission, event))
            elif self._retry_too_late(submission, deadlines.votes_revealed_from):
                self._abstain(submission, f"could not verify: {self._retries[submission].reason}")
        if not duties:
            return
        with self.reporter.progress(f"checking round {round_index}", len(duties)) as advance:
            for submission, event in duties:
                advance(1)
                if spec is None:
                    self._abstain(submission, self.unspoken)
                    continue
                judged = self._verdict_in_time(submission, event, spec, "attest", deadlines.votes_revealed_from)
                if judged is None:
                    continue
                valid, evidence_cid = judged
                salt = self.journal.salt(submission)
                with self.racing("commit_attestation", submission=submission):
                    self.crucible.commit_attestation(self.signer, submission, valid, evidence_cid, salt)
                    self.reporter.event("committed", round=round_index, submission=submission)

    def _reveal(self, round_index: int, submission: int, deadline: int) -> None:
        """Reveals its committed verdict on `submission` (from its journal) while the reveal lands before `deadline`."""
        opened = self._opening(submission, "attest", deadline)
        if opened is None:
            return
        valid, evidence_cid, salt = opened
        with self.racing("attest", submission=submission):
            self.crucible.attest(self.signer, submission, valid, evidence_cid, salt)
            self.summary.attested[str(submission)] = valid
            self.reporter.event("attested", round=round_index, submission=submission, valid=valid,
                                evidence_cid=evidence_cid)  # fmt: skip

    def _opening(self, submission: int, purpose: str, deadline: int) -> tuple[bool, str, bytes] | None:
        """What opens its `purpose` ("attest", "dispute") commitment on `submission`: the journaled verdict, evidence
        CID and salt, when a reveal sent now lands before `deadline`. None otherwise; a journal that lost the salt
        makes it abstain (the commitment cannot be opened: an attestation's is then slashed as withheld)."""
        known, salt = self.journal.get(submission), self.journal.stored_salt(submission, purpose)
        if known is None or salt is None:
            self._abstain(submission, f"cannot reveal: the journal lost the {purpose} vote's salt")
            return None
        if not self.lands_before(deadline, "attest" if purpose == "attest" else "vote_dispute", submission=submission):
            return None
        return bool(known["valid"]), str(known["evidence_cid"]), salt

    def _verdict_in_time(
        self, submission: int, event: dict[str, Any], spec: EnvSpec, purpose: str, deadline: int
    ) -> tuple[bool, str] | None:
        """This validator's verdict and evidence CID when it has one and a vote sent now lands before
        `deadline`; None when its own fault put the check off (or made it abstain) or the window is closing."""
        try:
            judged = self._judge(submission, event, spec, purpose)
        except OwnFault as error:
            self._own_fault(submission, error, deadline)
            return None
        if not self.lands_before(deadline, purpose, submission=submission):
            self._abstain(submission, f"the {purpose} window closes before the next block")
            return None
        return judged

    def _due(self, submission: int) -> bool:
        """Whether a check deferred for the validator's own fault is due to be tried again (or never was)."""
        retry = self._retries.get(submission)
        return retry is None or time.monotonic() >= retry.next_at

    def _retry_too_late(self, submission: int, deadline: int) -> bool:
        """Whether a deferred check's next try could no longer land before `deadline` (the chain's clock moved
        on faster than the pause: a slow chain, a devnet's warp)."""
        retry = self._retries.get(submission)
        if retry is None:
            return False
        return self.crucible.chain.lands_by() + max(0.0, retry.next_at - time.monotonic()) >= deadline

    def _own_fault(self, submission: int, error: OwnFault, deadline: int) -> None:
        """A check the validator could not run for a fault of its own: tried again after a growing pause,
        or, when the next try could not land before `deadline`, abstained from (no vote, no fee)."""
        retry = self._retries.get(submission)
        pause = RETRY_FIRST_S if retry is None else min(retry.pause_s * 2, RETRY_MAX_S)
        if self.crucible.chain.lands_by() + pause >= deadline:
            self._abstain(submission, f"could not verify: {error}")
            return
        self._retries[submission] = _Retry(pause, time.monotonic() + pause, str(error))
        self.reporter.event("verify_deferred", submission=submission, reason=str(error), retry_in_s=pause)

    def _abstain(self, submission: int, reason: str) -> None:
        self.summary.abstained[str(submission)] = reason
        self._retries.pop(submission, None)
        self.reporter.event("abstained", submission=submission, reason=reason)

    def _submission_id(self, event: dict[str, Any]) -> int:
        return submission_id(self.options.task_id, int(event["round"]), str(event["trainer"]))

    def _voted(self, event_name: str, submission: int) -> bool:
        return bool(self.crucible.events("TaskMarket", event_name, submissionId=submission, validator=self.address))

    def _judge(self, submission: int, event: dict[str, Any], spec: EnvSpec, purpose: str) -> tuple[bool, str]:
        """This validator's verdict on a submission and its evidence CID (computed once, then journaled)."""
        known = self.journal.get(submission)
        if known is not None:
            return bool(known["valid"]), str(known["evidence_cid"])
        self.reporter.event("checking", submission=submission, purpose=purpose)
        claim = self._claim_of(event)
        unchecked = self.options.adversary.verdict() if self.options.adversary else None
        verdict = unchecked if unchecked is not None else self._verify(claim, spec)
        document = evidence_document(submission, self.address, claim, verdict, purpose)
        evidence_cid = self.store.put(evidence_bytes(document))
        self.journal.record(submission, verdict.valid, evidence_cid, verdict.failed_check)
        self.reporter.event(
            "checked",
            submission=submission,
            valid=verdict.valid,
            failed_check=verdict.failed_check,
            seconds={r.check: round(r.seconds, 3) for r in verdict.results},
        )
        return verdict.valid, evidence_cid

    def _claim_of(self, event: dict[str, Any]) -> Claim:
        """The submission's claim, checked against the checkpoint of the base round it names."""
        context = RoundContext.of(self.crucible, self.options.task_id, int(event["round"]), str(event["trainer"]),
                                  base_round=int(event["baseRound"]))  # fmt: skip
        return claim_of(event, context)

    def _verify(self, claim: Claim, spec: EnvSpec) -> Verdict:
        loaded = self.models.get(claim.context.checkpoint_cid)
        context = claim.context
        artifacts = stored_artifacts(
            claim,
            self.store,
            self.options.device,
            lambda: self.crucible.previous_update(context.task_id, context.node, context.round_index),
        )
        return verify_submission(claim, spec, loaded, artifacts)

    # ------------------------------------------------------------ disputes

    def _dispute_duties(self, round_index: int, spec: EnvSpec) -> None:
        task_id = self.options.task_id
        submitted = {self._submission_id(e): e for e in self.crucible.submissions(task_id, round_index)}
        for submission, event in submitted.items():
            state = self.crucible.submission(submission)
            if state.disputed:
                self._committee_duty(submission, event, spec)
            elif self._should_dispute(round_index, submission, state):
                try:
                    self.crucible.require_committee(submission)
                except ConfigError as refusal:
                    self.reporter.event("cannot_dispute", submission=submission, reason=str(refusal))
                    continue
                challenge = self.crucible.deadlines(task_id, round_index).challenge
                if not self.lands_before(challenge, "dispute", submission=submission):
                    continue
                with self.racing("dispute", submission=submission):
                    # Invalid against an acceptance; valid against a false canary (what this validator saw).
                    self.crucible.dispute(self.signer, submission, claim_valid=state.rejected)
                    self.summary.disputed.append(str(submission))
                    self.reporter.event("disputed", round=round_index, submission=submission)

    def _should_dispute(self, round_index: int, submission: int, state: SubmissionState) -> bool:
        """An acceptance this validator attested invalid (outvoted, or no majority) is disputed; so is a revealed
        canary it checked and attested valid (a false canary: real work revealed to slash its checkers)."""
        if not self.options.dispute or (self.options.adversary and not self.options.adversary.disputes):
            return False
        false_canary = state.canary and state.rejected
        if state.rejected and not false_canary:
            return False
        task = self.crucible.task(self.options.task_id)
        reveals_end = self.crucible.deadlines(self.options.task_id, round_index).reveals_end
        if not false_canary and task.canary_rate_ppm and self.crucible.chain.now() < reveals_end:
            # It may be a canary still to be revealed: its reveal, not a dispute, settles it.
            return False
        known = self.journal.get(submission)
        if known is None or known["valid"] != false_canary:
            return False
        return self.crucible.balance_of(self.address) >= task.dispute_bond

    def _committee_duty(self, submission: int, event: dict[str, Any], spec: EnvSpec) -> None:
        dispute = self.crucible.dispute_state(submission)
        if not dispute.open:
            return
        if dispute.seed == bytes(32):
            # Fix the committee's seed from its block's prevrandao, or move a block whose hash is gone: no
            # dispute is left without a committee by neglect.
            with self.racing("fix_dispute_seed", submission=submission):
                if self.crucible.fix_dispute_seed(self.signer, submission) is not None:
                    moved = self.crucible.dispute_state(submission)
                    self.reporter.event(
                        "dispute_seed_fixed" if moved.seed != bytes(32) else "dispute_block_moved",
                        submission=submission,
                        block=moved.seed_block,
                    )
        committee = self.crucible.dispute_committee(submission)
        now = self.crucible.chain.now()
        if self.address in committee and now < dispute.deadline and str(submission) not in self.summary.abstained:
            revealed_from = self.crucible.dispute_votes_revealed_from(submission)
            committed = self._voted("DisputeVoteCommitted", submission)
            if now < revealed_from and not committed and self._due(submission):
                self._commit_dispute_vote(submission, event, spec, revealed_from)
            elif now >= revealed_from and committed and not self._voted("DisputeVoted", submission):
                self._reveal_dispute_vote(submission, dispute.deadline)
        voted = len(self.crucible.events("TaskMarket", "DisputeVoted", submissionId=submission))
        # One vote per member, however many of the committee's positions it holds; a dispute without a seed
        # resolves at its deadline too (not upheld: its bond goes to the task).
        if (committee and voted == len(set(committee))) or now >= dispute.deadline:
            with self.racing("resolve_dispute", submission=submission):
                self.crucible.resolve_dispute(self.signer, submission)
                resolved = self.crucible.dispute_state(submission)
                self.reporter.event("dispute_resolved", submission=submission, upheld=resolved.upheld)

    def _commit_dispute_vote(self, submission: int, event: dict[str, Any], spec: EnvSpec, deadline: int) -> None:
        """Checks the disputed submission and commits to its vote, landing before `deadline` (the reveal phase)."""
        judged = self._verdict_in_time(submission, event, spec, "dispute", deadline)
        if judged is None:
            return
        valid, evidence_cid = judged
        salt = self.journal.salt(submission, "dispute")
        with self.racing("commit_dispute_vote", submission=submission):
            self.crucible.commit_dispute_vote(self.signer, submission, valid, evidence_cid, salt)
            self.reporter.event("dispute_vote_committed", submission=submission)

    def _reveal_dispute_vote(self, submission: int, deadline: int) -> None:
        """Reveals its committed dispute vote (from its journal) while the reveal lands before `deadline`."""
        opened = self._opening(submission, "dispute", deadline)
        if opened is None:
            return
        valid, evidence_cid, salt = opened
        with self.racing("vote_dispute", submission=submission):
            self.crucible.vote_dispute(self.signer, submission, valid, evidence_cid, salt)
            self.summary.dispute_votes[str(submission)] = valid
            self.reporter.event("dispute_voted", submission=submission, valid=valid, evidence_cid=evidence_cid)

    # ------------------------------------------------------------ aggregation

    def _propose(self, round_index: int, spec: EnvSpec) -> None:
        task_id = self.options.task_id
        state = self.crucible.round(task_id, round_index)
        task = self.crucible.task(task_id)
        if state.open_disputes or state.finalised or state.check_seed == bytes(32) or task.current_round != round_index:
            return
        mine = self._my_range(state.seat_stake)
        aggregators = aggregator_positions(state.check_seed, state.seat_stake, task.validators_per_check)
        if (
            mine is None
            or not bits_within(aggregators, *mine)
            or self.crucible.has_proposed(task_id, round_index, self.address)
        ):
            return
        included = []
        for event in self.crucible.submissions(task_id, round_index):
            submission = self._submission_id(event)
            if not self.crucible.submission(submission).rejected:
                included.append((submission, str(event["updateCid"])))
        key = (round_index, tuple(sorted(s for s, _ in included)))
        cid = self._proposals.get(key)
        if cid is None:
            cid = self._aggregate(round_index, included, spec)
            self._proposals[key] = cid
        with self.racing("propose_checkpoint", round=round_index):
            # The epoch the included set was read in: a reveal or a dispute since makes the chain refuse it (raced).
            self.crucible.propose_checkpoint(self.signer, task_id, round_index, cid, state.checkpoint_epoch)
            self.summary.proposed.append(round_index)
            self.reporter.event("proposed", round=round_index, checkpoint_cid=cid, updates=len(included))

    def _aggregate(self, round_index: int, included: list[tuple[int, str]], spec: EnvSpec) -> str:
        # The round's own checkpoint, whatever bases its updates started from: the delayed outer step
        # (docs/protocol.md, "Rounds that overlap").
        checkpoint_cid = self.crucible.checkpoint_cid(self.options.task_id, round_index)
        loaded = self.models.get(checkpoint_cid)
        # An own fault propagates (the pass is retried); an update nobody serves sound is left out (and
        # disputable).
        updates, unavailable = load_included_updates(included, self.store, self.options.device)
        for submission, _, error in unavailable:
            self.reporter.event("update_unavailable", submission=submission, reason=str(error))
        return publish_next_checkpoint(loaded, updates, spec.training, self.store)

    # ------------------------------------------------------------ getting paid

    def _settled(self, round_index: int) -> bool:
        task_id = self.options.task_id
        return all(
            self.crucible.submission(self._submission_id(e)).settled
            for e in self.crucible.submissions(task_id, round_index)
        )

    def _settle(self, round_index: int) -> None:
        for event in self.crucible.submissions(self.options.task_id, round_index):
            self.settle(self._submission_id(event))

    def _claim(self) -> None:
        self.summary.claimed_wei += self.claim_credits()
