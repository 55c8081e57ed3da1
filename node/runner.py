"""The trainer node's loop: wait for a round, fetch its checkpoint, work, publish, submit; keep the
round moving (fix seeds, finalise) and collect what it earned. Crash-safe through its journal.

On a task that pipelines (`max_staleness` above 0) the node opens the next round as soon as the chain
allows and works on it from the newest agreed checkpoint while older rounds are validated; it settles
and claims those as they end. It records how long it computed, to report its busy fraction."""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from node.adversary import Adversary
from node.canary import Canary
from node.work import Progress, RoundWork, produce_work
from protocol.accounts import Signer
from protocol.artifacts.backends import describe_store
from protocol.artifacts.store import LocalStore, Store
from protocol.chain.client import Crucible, Role, TaskState
from protocol.chain.ids import submission_id
from protocol.errors import ConfigError, ContractRevert
from protocol.ml.compression import carried_residual, load_residual, save_update
from protocol.ml.envs.spec import EnvSpec
from protocol.ml.model import ModelCache
from protocol.runtime.journal import Journal, RoundRecord
from protocol.runtime.participant import Participant
from protocol.runtime.reporter import Reporter
from protocol.work.round import RoundContext


@dataclass
class NodeOptions:
    """How the node runs."""

    task_id: int
    rounds: int | None = None
    device: str = "cpu"
    batch_size: int = 64
    poll_s: float = 1.0
    adversary: Adversary | None = None
    force_adversary: bool = False
    # Dispute a rejection of its own submission (None: an honest node does, a red-team one does not).
    dispute: bool | None = None
    # Plant the task creator's canaries instead of real work (`node.canary`); its fault is the adversary.
    canary: Canary | None = None

    @property
    def disputes_rejections(self) -> bool:
        """Whether the node disputes a rejection of its submission (a canary never does)."""
        if self.canary is not None:
            return False
        return self.adversary is None if self.dispute is None else self.dispute


@dataclass
class NodeSummary:
    """What a run did."""

    submitted: list[int] = field(default_factory=list)
    skipped: list[int] = field(default_factory=list)
    claimed_wei: int = 0
    # Seconds spent preparing work (fetch, generate, prove, train, publish) and the run's wall time.
    busy_s: float = 0.0
    wall_s: float = 0.0
    # Round -> how many rounds behind it the base of the submitted work was.
    staleness: dict[int, int] = field(default_factory=dict)

    @property
    def busy_fraction(self) -> float:
        """Compute time over wall time."""
        return self.busy_s / self.wall_s if self.wall_s else 0.0


# Why a round is skipped when the stake is locked by open submissions (or was slashed): said before any
# work when seen in time, and again when a submission races a slash.
NO_FREE_STAKE = "not enough free stake to back another submission"


class TrainerNode(Participant):
    """One trainer identity working on one task."""

    def __init__(
        self, crucible: Crucible, signer: Signer, store: Store, options: NodeOptions, reporter: Reporter
    ) -> None:
        super().__init__(crucible, signer, store, reporter, options.task_id)
        self.options = options
        self.journal = Journal(self.state_file("node"))
        self.models = ModelCache(self.store, options.device)
        self._last_work_s: float | None = None
        self.summary = NodeSummary()

    # ------------------------------------------------------------ checks

    def check_ready(self) -> EnvSpec:
        """Refuses to start when the node cannot take part; returns the task's environment spec."""
        adversary = self.options.adversary
        if self.options.canary is not None:
            self._check_canary()
        else:
            self.refuse_red_team_off_devnet(adversary.name if adversary else None, self.options.force_adversary)
        # Stake its own open submissions lock is its own: a node restarted after submitting resumes them
        # (and settles them, which unlocks it) instead of asking for more.
        open_own = self._open_submissions()
        self.check_stake(Role.TRAINER, None if open_own else self.crucible.task(self.options.task_id).min_trainer_stake)
        for event in open_own:
            round_index = int(event["round"])
            if self.journal.get(round_index) is None:  # the journal lost: the chain says what was sent
                self.journal.record(round_index, _sent(event, "", "found on chain"))
        if open_own:
            self.reporter.event("resuming", submissions=[int(e["submissionId"]) for e in open_own])
        spec = self.task_spec()  # a task of a version it does not speak is refused first, in one line
        self.report_validator_set()
        return spec

    def _check_canary(self) -> None:
        """A canary node plants the creator's canaries in a task that takes them, or refuses in one line."""
        task_id = self.options.task_id
        task = self.crucible.task(task_id)
        creator = self.options.canary.creator if self.options.canary else None
        if creator is None or creator.address.lower() != task.creator.lower():
            raise ConfigError(f"--creator-account must be the creator of task {task_id} ({task.creator}): it reveals")
        if task.canary_rate_ppm == 0:
            raise ConfigError(f"task {task_id} takes no canaries (its canary rate is 0)")
        if creator.address.lower() == self.address.lower():
            raise ConfigError("a canary is planted from an address of its own, not the creator's")

    def _open_submissions(self) -> list[dict[str, Any]]:
        """The WorkSubmitted events of this node's submissions to the task not settled yet."""
        return [
            event
            for event in self.crucible.submissions(self.options.task_id)
            if event["trainer"] == self.address and not self.crucible.submission(int(event["submissionId"])).settled
        ]

    # ------------------------------------------------------------ loop

    def run(self) -> NodeSummary:
        """Takes part in rounds until `rounds` were submitted and settled, or the task ended."""
        spec = self.check_ready()
        task_id = self.options.task_id
        started = time.perf_counter()
        self.warn_if_unchecked()
        self.reporter.event("started", task=task_id, node=self.address, adversary=self._adversary_name(),
                            store=describe_store(self.store))  # fmt: skip

        def one_pass() -> bool:
            task = self.crucible.task(task_id)
            self._settle_and_claim()
            if task.ended:
                self.reporter.event("task_ended", task=task_id)
                return True
            if self._open_ahead(task):
                task = self.crucible.task(task_id)
            for round_index in self.crucible.live_rounds(task):
                self._check_still_submitted(round_index)
                record = self.journal.get(round_index)
                if (record is None or record.status == "prepared") and not self._limit_reached():
                    self._take_part(round_index, spec, task.current_round)
            if self._limit_reached() and not self.journal.with_status("submitted"):
                return True
            for round_index in self.crucible.live_rounds(task):
                self._keep(round_index)
            return False

        self.poll_until(one_pass, self.options.poll_s)
        self._settle_and_claim()
        self.summary.wall_s = time.perf_counter() - started
        self.reporter.event(
            "finished",
            submitted_rounds=self.summary.submitted,
            skipped_rounds=self.summary.skipped,
            claimed_wei=str(self.summary.claimed_wei),
            busy_s=round(self.summary.busy_s, 2),
            wall_s=round(self.summary.wall_s, 2),
            busy_fraction=round(self.summary.busy_fraction, 4),
            staleness={str(k): v for k, v in sorted(self.summary.staleness.items())},
            fees=self.crucible.chain.fees.as_json(),
        )
        return self.summary

    def _open_ahead(self, task: TaskState) -> bool:
        """Opens the next round ahead of finality when the task pipelines and the chain allows it (the newest
        round stopped taking work, and the next is within the staleness bound). Returns whether it sent."""
        following = task.open_round + 1
        if not task.max_staleness or following >= task.rounds or following - task.current_round > task.max_staleness:
            return False
        if self._limit_reached():
            return False
        if self.crucible.chain.now() < self.crucible.deadlines(self.options.task_id, task.open_round).submit:
            return False
        with self.racing("open_next_round", round=following):
            self.crucible.open_next_round(self.signer, self.options.task_id)
            self.reporter.event("round_opened_ahead", round=following, current=task.current_round)
            return True
        return False

    def _adversary_name(self) -> str | None:
        return self.options.adversary.name if self.options.adversary else None

    def _limit_reached(self) -> bool:
        return (
            self.options.rounds is not None
            and len(self.journal.with_status("submitted", "settled")) >= self.options.rounds
        )

    # ------------------------------------------------------------ one round

    def _check_still_submitted(self, round_index: int) -> None:
        """A reorg can drop a mined submission: while the window is open, a submission the chain no
        longer holds goes back to "prepared" (same artifacts, same digest) and is sent again."""
        record = self.journal.get(round_index)
        if record is None or record.status != "submitted" or not record.proofs_digest:
            return
        deadline = self.crucible.deadlines(self.options.task_id, round_index).submit
        if self.crucible.chain.now() >= deadline:
            return
        if self.crucible.submitted(self.options.task_id, round_index, self.address) is None:
            self.reporter.event("resubmitting", round=round_index, reason="the chain no longer holds the submission")
            self.crucible.chain.sender.forget_nonce(self.address)
            self.journal.record(round_index, record.now("prepared", "dropped by a reorg"))
            if round_index in self.summary.submitted:
                self.summary.submitted.remove(round_index)

    def _take_part(self, round_index: int, spec: EnvSpec, newest_agreed: int) -> None:
        task_id = self.options.task_id
        found = self.crucible.submitted(task_id, round_index, self.address)
        if found is not None:
            # Sent before a crash: keep what the chain says it was (and the digest, if prepared here).
            known = self.journal.get(round_index)
            digest = known.proofs_digest if known else ""
            self.journal.record(round_index, _sent(found, digest, "found on chain"))
            return
        deadline = self.crucible.deadlines(task_id, round_index).submit
        now = self.crucible.chain.now()
        record = self.journal.get(round_index)
        if now >= deadline:
            return self._skip(round_index, "the submission window had closed")
        if record is None:
            if self._last_work_s is not None and now + self._last_work_s > deadline:
                took, self._last_work_s = self._last_work_s, None
                # One slow round (the first carries the start-up: loading the model, warming torch) must not
                # idle the node for good: the next round is tried, and measured, again.
                return self._skip(round_index, f"{deadline - now} s left, the last round's work took {took:.0f} s")
            free = self.crucible.stake_account(self.address).free
            if free < self.crucible.task(task_id).min_trainer_stake:
                # Its open submissions still lock the stake (settled when their rounds end), or it was slashed.
                return self._skip(round_index, NO_FREE_STAKE)
            base = newest_agreed
            if self.options.canary is not None:
                market = self.crucible.market.address
                self.options.adversary = self.options.canary.fault(market, self._submission(round_index))
            if self.options.adversary is not None:
                base = self.options.adversary.base_round(round_index, newest_agreed, self._max_staleness())
            prepared = self._prepare(round_index, spec, base)
        else:
            prepared = record
            self.reporter.event("resumed", round=round_index, rollout_cid=prepared.rollout_cid)
        self._submit(round_index, prepared, deadline)

    def _max_staleness(self) -> int:
        return self.crucible.task(self.options.task_id).max_staleness

    def _prepare(self, round_index: int, spec: EnvSpec, base_round: int) -> RoundRecord:
        """The node's work for a round, from the agreed checkpoint of `base_round`, published and journaled."""
        task_id = self.options.task_id
        started = time.perf_counter()
        checkpoint_cid = self.crucible.checkpoint_cid(task_id, base_round)
        self.reporter.event("round_opened", round=round_index, base_round=base_round, checkpoint_cid=checkpoint_cid)
        loaded = self.models.get(checkpoint_cid)
        context = RoundContext.of(self.crucible, task_id, round_index, self.address, checkpoint_cid=checkpoint_cid,
                                  base_round=base_round)  # fmt: skip
        completions = spec.training.prompts_per_round * spec.training.group_size
        # At most this many steps: sequences with no advantage are left out of the update.
        steps = spec.training.inner_steps * -(-completions // (spec.training.minibatch_size or completions))
        with (
            self.reporter.progress("generating", completions) as generated,
            self.reporter.progress("training", steps) as trained,
        ):
            work = produce_work(
                loaded,
                spec,
                context,
                self.options.batch_size,
                Progress(generated=generated, trained=lambda step, loss: trained(1)),
                self.options.adversary,
            )
        prepared = self._publish(work, checkpoint_cid, base_round, spec, round_index)
        self._last_work_s = time.perf_counter() - started
        self.summary.busy_s += self._last_work_s
        self.journal.record(round_index, prepared)
        rewards = [sample.reward for sample in work.rollouts.samples]
        self.reporter.event(
            "prepared",
            round=round_index,
            rollout_cid=prepared.rollout_cid,
            update_cid=prepared.update_cid,
            work_units=prepared.work_units,
            mean_reward=round(sum(rewards) / len(rewards), 4),
            generate_s=round(work.generate_s, 2),
            prove_s=round(work.prove_s, 3),
            train_s=round(work.train_s, 2),
        )
        return prepared

    def _publish(
        self, work: RoundWork, checkpoint_cid: str, base_round: int, spec: EnvSpec, round_index: int
    ) -> RoundRecord:
        """Stores the rollout file and the update manifest as the spec encodes it (a withholding node
        computes CIDs only). A `topk` update starts from the residual the node's previous submission on
        chain carried, as its validators will look it up."""
        residual_base = None
        if spec.training.encoding.kind == "topk":
            previous = self.crucible.previous_update(self.options.task_id, self.address, round_index)
            carried = carried_residual(previous, self.store)
            residual_base = (carried, load_residual(carried, self.store)) if carried else None

        withhold = self.options.adversary is not None and not self.options.adversary.stores_artifacts
        with tempfile.TemporaryDirectory(prefix="crucible-withheld-") as scratch:
            target: Store = LocalStore(Path(scratch)) if withhold else self.store
            rollout_cid = target.put(work.rollouts.to_bytes())
            update_cid = save_update(work.update, target, checkpoint_cid, spec.training.encoding, residual_base)
        digest = work.rollouts.proofs_digest().hex()
        return RoundRecord("prepared", rollout_cid, update_cid, work.rollouts.work_units, digest,
                           base_round=base_round)  # fmt: skip

    def _submit(self, round_index: int, prepared: RoundRecord, deadline: int) -> None:
        task_id = self.options.task_id
        choice: RoundRecord | None = prepared
        if self.options.adversary:
            earlier = [
                r
                for index, r in sorted(self.journal.rounds.items())
                if index < round_index and r.status in ("submitted", "settled") and r.rollout_cid
            ]

            def others() -> list[dict[str, Any]]:
                found = self.crucible.submissions(task_id, round_index)
                return [event for event in found if event["trainer"] != self.address]

            choice = self.options.adversary.choose_submission(prepared, others, earlier)
            while choice is None and self.crucible.chain.now() < deadline - 2:
                time.sleep(self.options.poll_s)
                choice = self.options.adversary.choose_submission(prepared, others, earlier)
            if choice is not None and choice is not prepared:
                # Someone else's or older work, claimed as built on this round's base.
                choice = replace(choice, base_round=prepared.base_round)
        if choice is None:
            return self._skip(round_index, "nothing to submit before the deadline")
        if not self.lands_before(deadline, "submit", round=round_index):
            return self._skip(round_index, "the submission window closes before the next block")
        try:
            self.crucible.submit_work(
                self.signer,
                task_id,
                round_index,
                choice.rollout_cid,
                choice.update_cid,
                choice.work_units,
                choice.digest(),
                base_round=choice.base_of(round_index),
                tag=self._tag(round_index),
            )
        except ContractRevert as error:
            if error.name == "MarketDuplicateSubmission":
                return self.journal.record(round_index, choice.now("submitted", "found on chain"))
            if error.name == "MarketOutsideWindow":
                return self._skip(round_index, "the submission window closed while sending")
            if error.name == "MarketBaseOutOfBound":
                return self._skip(round_index, f"the chain refused base round {choice.base_of(round_index)}")
            if error.name == "StakeInsufficientFree":
                # Its earlier submissions still hold their locks (not settled yet), or it was slashed.
                return self._skip(round_index, NO_FREE_STAKE)
            raise
        self.journal.record(round_index, choice.now("submitted"))
        self.summary.submitted.append(round_index)
        self.summary.staleness[round_index] = round_index - choice.base_of(round_index)
        self.reporter.event(
            "submitted",
            round=round_index,
            submission=submission_id(task_id, round_index, self.address),
            rollout_cid=choice.rollout_cid,
            update_cid=choice.update_cid,
            work_units=choice.work_units,
            base_round=choice.base_of(round_index),
        )

    def _submission(self, round_index: int) -> int:
        return submission_id(self.options.task_id, round_index, self.address)

    def _tag(self, round_index: int) -> bytes | None:
        """A canary's tag; None (random bytes) for real work."""
        canary = self.options.canary
        return canary.tag(self.crucible.market.address, self._submission(round_index)) if canary else None

    def _reveal_canary(self, round_index: int) -> None:
        """A canary node reveals its canary once the votes are in: from the validate deadline until the middle of
        the challenge window (a dispute on it may still follow)."""
        canary = self.options.canary
        if canary is None:
            return
        submission = self._submission(round_index)
        state = self.crucible.submission(submission)
        if state.canary or state.disputed or state.work_units == 0:
            return
        deadlines = self.crucible.deadlines(self.options.task_id, round_index)
        if not deadlines.validate <= self.crucible.chain.now() < deadlines.reveals_end:
            return
        if not self.lands_before(deadlines.reveals_end, "reveal_canary", round=round_index):
            return
        with self.racing("reveal_canary", round=round_index):
            self.crucible.reveal_canary(
                canary.creator, submission, canary.salt(self.crucible.market.address, submission)
            )
            self.reporter.event("canary_revealed", round=round_index, submission=submission)

    def _skip(self, round_index: int, reason: str) -> None:
        self.journal.record(round_index, RoundRecord("skipped", reason=reason))
        self.summary.skipped.append(round_index)
        self.reporter.event("skipped", round=round_index, reason=reason)

    # ------------------------------------------------------------ keeping rounds moving, getting paid

    def _keep(self, round_index: int) -> None:
        """Does the permissionless steps nobody else did: fix the check seed, finalise the round."""
        task_id = self.options.task_id
        state = self.crucible.round(task_id, round_index)
        deadlines = self.crucible.deadlines(task_id, round_index)
        self.keep_round(round_index, state, deadlines, self.crucible.chain.now())

    def _dispute_rejection(self, round_index: int) -> None:
        """Disputes a rejection of its own submission during the challenge window, bond permitting."""
        task_id = self.options.task_id
        submission = submission_id(task_id, round_index, self.address)
        state = self.crucible.submission(submission)
        if not (state.rejected and not state.disputed and self.options.disputes_rejections):
            return
        deadlines = self.crucible.deadlines(task_id, round_index)
        if not deadlines.validate <= self.crucible.chain.now() < deadlines.challenge:
            return
        if self.crucible.balance_of(self.address) < self.crucible.task(task_id).dispute_bond:
            self.reporter.event("cannot_dispute", round=round_index, reason="balance below the dispute bond")
            return
        if not self.lands_before(deadlines.challenge, "dispute", round=round_index):
            return
        with self.racing("dispute", round=round_index):
            self.crucible.dispute(self.signer, submission, claim_valid=True)
            self.reporter.event("disputed", round=round_index, submission=submission)

    def _settle_and_claim(self) -> None:
        task_id = self.options.task_id
        for round_index in self.journal.with_status("submitted"):
            if not self.crucible.round(task_id, round_index).finalised:
                self._reveal_canary(round_index)
                self._dispute_rejection(round_index)
                continue
            submission = submission_id(task_id, round_index, self.address)
            self.settle(submission)
            record = self.journal.rounds[round_index]
            self.journal.record(round_index, record.now("settled", record.reason))
            self.reporter.event("settled", round=round_index, rejected=self.crucible.submission(submission).rejected)
        self.summary.claimed_wei += self.claim_credits()


def _sent(event: dict[str, Any], proofs_digest: str, reason: str) -> RoundRecord:
    """The journal record of a submission the chain holds (its WorkSubmitted event)."""
    return RoundRecord(
        "submitted",
        str(event["rolloutCid"]),
        str(event["updateCid"]),
        int(event["workUnits"]),
        proofs_digest,
        reason,
        int(event["baseRound"]),
    )
