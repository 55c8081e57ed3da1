"""The auditor: rebuild what happened to a task from the event index and the content-addressed
artifacts, re-run the validators' checks independently, and flag every disagreement.

Nothing here trusts a validator: assignments are recomputed from the check seeds
(`protocol.chain.assignment`), every artifact is fetched by CID and checked against it on the way in (the
store does this), each submission is re-run with the same `verify_submission` a validator calls,
the round's next checkpoint is recomputed from the included updates, and the task's money is
balanced to the wei from events against the contract's state.

Findings (what an auditor acts on):
- `pending-cheat`: the re-run fails it, but its round's check seed is not fixed yet.
- `unsampled-cheat`: accepted without a check, yet the re-run fails it (dispute it).
- `wrong-outcome`: the final outcome (accepted/rejected) contradicts the re-run.
- `validator-disagrees`: an attestation or dispute vote contradicts the re-run (lazy or lying).
- `evidence`: an attestation's evidence is missing, malformed, or does not say what was attested.
- `artifact`: a submission's rollout file or update cannot be fetched or fails its CID.
- `checkpoint`: the agreed next checkpoint is not the aggregate of the included updates.
- `money`: the task's books do not balance.

What the auditor could not verify for a fault of its own (a damaged local copy set aside and no sound
copy to be had, no source reachable, its disk) is a note, never a finding: findings are against
others, and `crucible audit` exits 1 when there are any.
"""

from __future__ import annotations

from eth_utils import keccak

from auditor.index import Event, EventIndex
from auditor.money import money_check
from auditor.report import Finding, RoundAudit, SubmissionAudit, TaskAudit, Vote
from protocol.artifacts.fetch import RelayStore
from protocol.artifacts.manifest import load_manifest
from protocol.artifacts.store import Store
from protocol.chain.assignment import Member, assigned_positions, holders, is_sampled
from protocol.chain.client import Crucible
from protocol.chain.ids import checkpoint_digests, decode_submission_id, submission_text
from protocol.chain.params import TaskParams
from protocol.errors import ConfigError, CrucibleError, OwnFault
from protocol.ml.aggregation import load_included_updates, outer_step_lines, publish_next_checkpoint
from protocol.ml.envs.spec import EnvSpec, parse_spec
from protocol.ml.evaluation import evaluate
from protocol.ml.model import ModelCache
from protocol.work.checks import Claim, Verdict, claim_of, stored_artifacts, verify_submission
from protocol.work.evidence import parse_evidence
from protocol.work.round import RoundContext


class Auditor:
    """Audits tasks of one deployment from its event index and a store."""

    def __init__(
        self, crucible: Crucible, index: EventIndex, store: Store, device: str = "cpu", rerun: bool = True
    ) -> None:
        self.crucible = crucible
        self.index = index
        self.store = store
        self.device = device
        self.rerun = rerun
        self._specs: dict[str, EnvSpec] = {}
        self.models = ModelCache(store, device)

    # ------------------------------------------------------------ what the chain said

    def created(self, task_id: int) -> Event:
        """The task's TaskCreated event; ConfigError for an unknown task."""
        found = self.index.events("TaskCreated", task=task_id)
        if not found:
            raise ConfigError(f"unknown task {task_id}: the index knows tasks {self.index.task_ids() or 'none'}")
        return found[0]

    def spec(self, env_cid: str) -> EnvSpec:
        if env_cid not in self._specs:
            self._specs[env_cid] = parse_spec(self.store.get(env_cid), env_cid)
        return self._specs[env_cid]

    def checkpoint_cids(self, task_id: int) -> dict[bytes, str]:
        """Every checkpoint the task used, by the digest the chain stores."""
        agreed = [str(e.args["checkpointCid"]) for e in self.index.events("CheckpointAgreed", task=task_id)]
        return checkpoint_digests(str(self.created(task_id).args["modelCid"]), agreed)

    def round_checkpoint(self, task_id: int, round_index: int) -> bytes | None:
        """The digest of a round's checkpoint: the one it opened on or, for a round opened ahead of finality,
        the one fixed when the round before it was final (`CheckpointFixed`); None while not fixed."""
        opened = self.index.events("RoundOpened", task=task_id, round_index=round_index)
        if not opened:
            return None
        digest = bytes.fromhex(str(opened[0].args["checkpoint"])[2:])
        if digest != bytes(32):
            return digest
        fixed = self.index.events("CheckpointFixed", task=task_id, round_index=round_index)
        return bytes.fromhex(str(fixed[0].args["checkpoint"])[2:]) if fixed else None

    def validators(self, task_id: int) -> list[str]:
        """The task's validators by slot, as the market numbers them."""
        return [member.account for member, _ in self.members(task_id)]

    def members(self, task_id: int) -> list[tuple[Member, int]]:
        """The task's members in joining order, each with the stake its seat weighs, from `ValidatorJoined`."""
        joined = sorted(self.index.events("ValidatorJoined", task=task_id), key=lambda e: int(e.args["index"]))
        return [(Member(str(e.args["validator"]), int(e.args["from"])), int(e.args["stake"])) for e in joined]

    # ------------------------------------------------------------ submissions

    def submission(self, submission: int, rerun: bool | None = None) -> SubmissionAudit:
        """One submission's history and, when `rerun`, the auditor's own verdict and findings."""
        submitted = self.index.events("WorkSubmitted", submission=submission)
        if not submitted:
            raise ConfigError(f"unknown submission {submission_text(submission)}: no WorkSubmitted event in the index")
        event = submitted[0]
        task_id, round_index, trainer = decode_submission_id(submission)
        created = self.created(task_id)
        params = created.args["params"]
        fixed = self.index.events("CheckSeedFixed", task=task_id, round_index=round_index)
        sampled, assigned = False, []
        if fixed:
            seed = bytes.fromhex(str(fixed[0].args["checkSeed"])[2:])
            count = int(fixed[0].args["validatorCount"])
            sampled = is_sampled(seed, submission, int(params["sampleRatePpm"]))
            if sampled:
                # The round's draws share out the seat stake of the members counted at its snapshot.
                members = self.members(task_id)[:count]
                last, last_stake = members[-1]
                picks = assigned_positions(seed, submission, last.start + last_stake, int(params["validatorsPerCheck"]))
                assigned = holders([member for member, _ in members], picks)
        history = self.index.events(submission=submission)
        votes = [
            self._vote(e, "attest" if e.name == "Attested" else "dispute")
            for e in history
            if e.name in ("Attested", "DisputeVoted")
        ]
        disputed = next((e for e in history if e.name == "Disputed"), None)
        resolved = next((e for e in history if e.name == "DisputeResolved"), None)
        settled = next((e for e in history if e.name == "Settled"), None)
        state = self.crucible.submission(submission)
        audit = SubmissionAudit(
            submission=submission,
            task_id=task_id,
            round_index=round_index,
            trainer=trainer,
            rollout_cid=str(event.args["rolloutCid"]),
            update_cid=str(event.args["updateCid"]),
            work_units=int(event.args["workUnits"]),
            block=event.block,
            sampled=sampled,
            assigned=assigned,
            votes=votes,
            disputed_by=None if disputed is None else str(disputed.args["disputer"]),
            dispute_upheld=None if resolved is None else bool(resolved.args["upheld"]),
            rejected=state.rejected,
            settled=state.settled,
            reward_wei=0 if settled is None else int(settled.args["reward"]),
            slashed_wei=0 if settled is None else int(settled.args["slashed"]),
            base_round=int(event.args["baseRound"]),
            seed_fixed=bool(fixed),
            canary=state.canary,
            committed=[str(e.args["validator"]) for e in history if e.name == "AttestationCommitted"],
        )
        for vote in votes:
            if vote.evidence_unread:
                audit.notes.append(f"could not read {vote.validator}'s {vote.purpose} evidence: {vote.evidence_unread}")
            elif vote.evidence_problem:
                audit.findings.append(
                    Finding("evidence", f"{vote.validator}'s {vote.purpose} evidence: {vote.evidence_problem}")
                )
        if self.rerun if rerun is None else rerun:
            try:
                audit.rerun = self._rerun(submission)
            except OwnFault as error:
                audit.notes.append(f"could not verify: {error}")
                return audit
            self._judge(audit)
        return audit

    def _vote(self, event: Event, purpose: str) -> Vote:
        vote = Vote(str(event.args["validator"]), bool(event.args["valid"]), str(event.args["evidenceCid"]), purpose)
        try:
            document = parse_evidence(self.store.get(vote.evidence_cid), vote.evidence_cid)
        except OwnFault as error:
            vote.evidence_unread = str(error)
            return vote
        except CrucibleError as error:
            vote.evidence_problem = f"unavailable or malformed ({error})"
            return vote
        vote.evidence_check = document.get("failed_check")
        if str(document.get("submission")) != str(event.submission):
            vote.evidence_problem = f"it is about submission {document.get('submission')}, not {event.submission}"
        elif str(document.get("validator", "")).lower() != vote.validator.lower():
            vote.evidence_problem = f"it was written by {document.get('validator')}, not {vote.validator}"
        elif bool(document.get("valid")) != vote.valid:
            vote.evidence_problem = f"it says valid={document.get('valid')}, the vote says valid={vote.valid}"
        elif any(check.get("check") == "none" for check in document.get("checks", [])):
            vote.evidence_problem = "it records no check at all"
        return vote

    def claim(self, submission: int) -> Claim:
        """What the chain says of a submission, rebuilt from the index alone."""
        submitted = self.index.events("WorkSubmitted", submission=submission)
        if not submitted:
            raise ConfigError(f"unknown submission {submission_text(submission)}: no WorkSubmitted event in the index")
        task_id, round_index, trainer = decode_submission_id(submission)
        opened = self.index.events("RoundOpened", task=task_id, round_index=round_index)
        # The work started from its base round's checkpoint (its own round's unless the task pipelines).
        base_round = int(submitted[0].args["baseRound"])
        digest = self.round_checkpoint(task_id, base_round)
        checkpoint_cid = None if digest is None else self.checkpoint_cids(task_id).get(digest)
        if checkpoint_cid is None:
            raise ConfigError(f"no event names the checkpoint of task {task_id} round {base_round}")
        context = RoundContext.of(
            self.crucible,
            task_id,
            round_index,
            trainer,
            work_seed=bytes.fromhex(str(opened[0].args["workSeed"])[2:]),
            checkpoint_cid=checkpoint_cid,
            env_cid=str(self.created(task_id).args["envCid"]),
            base_round=base_round,
        )
        return claim_of(submitted[0].args, context)

    def _rerun(self, submission: int) -> Verdict:
        claim = self.claim(submission)
        loaded = self.models.get(claim.context.checkpoint_cid)
        spec = self.spec(claim.context.env_cid)
        context = claim.context
        artifacts = stored_artifacts(
            claim,
            self.store,
            self.device,
            lambda: self.crucible.previous_update(context.task_id, context.node, context.round_index),
        )
        return verify_submission(claim, spec, loaded, artifacts)

    @staticmethod
    def _judge(audit: SubmissionAudit) -> None:
        verdict = audit.rerun
        assert verdict is not None
        said = "valid" if verdict.valid else f"invalid ({verdict.failed_check}: {verdict.results[-1].reason})"
        if verdict.failed_check == "availability":
            audit.findings.append(Finding("artifact", f"the rollout file {audit.rollout_cid} is unavailable"))
        if not verdict.valid and not audit.seed_fixed:
            audit.findings.append(
                Finding("pending-cheat", f"the re-run finds it {said}; its check seed is not fixed yet")
            )
        elif not verdict.valid and not audit.rejected:
            kind = "wrong-outcome" if audit.sampled else "unsampled-cheat"
            how = "accepted after its check" if audit.sampled else "accepted unchecked (not sampled)"
            audit.findings.append(Finding(kind, f"{how}, but the re-run finds it {said}: dispute it"))
        if verdict.valid and audit.rejected and audit.canary:
            audit.findings.append(
                Finding("false-canary", "revealed as a canary, but the re-run passes every check: anyone may dispute")
            )
        elif verdict.valid and audit.rejected:
            audit.findings.append(
                Finding("wrong-outcome", "rejected, but the re-run passes every check: its trainer may dispute")
            )
        for vote in audit.votes:
            if vote.valid != verdict.valid:
                audit.findings.append(
                    Finding(
                        "validator-disagrees",
                        f"{vote.validator} voted {'valid' if vote.valid else 'invalid'} ({vote.purpose}); "
                        f"the re-run finds it {said}",
                    )
                )

    # ------------------------------------------------------------ rounds

    def round(
        self, task_id: int, round_index: int, rerun: bool | None = None, evaluate_model: bool = False
    ) -> RoundAudit:
        """One round: its submissions (re-run when asked) and its checkpoint agreement, recomputed."""
        created = self.created(task_id)
        opened = self.index.events("RoundOpened", task=task_id, round_index=round_index)
        if not opened:
            rounds = len(self.index.events("RoundOpened", task=task_id))
            raise ConfigError(f"task {task_id} has no round {round_index}: {rounds} rounds opened so far")
        digest = self.round_checkpoint(task_id, round_index)
        # Empty for a round opened ahead whose round before is not final yet.
        checkpoint_cid = "" if digest is None else self.checkpoint_cids(task_id).get(digest, "0x" + digest.hex())
        fixed = self.index.events("CheckSeedFixed", task=task_id, round_index=round_index)
        agreed = self.index.events("CheckpointAgreed", task=task_id, round_index=round_index)
        finalised = self.index.events("RoundFinalised", task=task_id, round_index=round_index)
        submissions = [
            self.submission(int(e.submission or 0), rerun)
            for e in self.index.events("WorkSubmitted", task=task_id, round_index=round_index)
        ]
        audit = RoundAudit(
            task_id=task_id,
            round_index=round_index,
            checkpoint_cid=checkpoint_cid,
            work_seed=str(opened[0].args["workSeed"]),
            check_seed=str(fixed[0].args["checkSeed"]) if fixed else None,
            finalised=bool(finalised),
            submissions=submissions,
            proposals=[
                {"aggregator": str(e.args["aggregator"]), "checkpoint_cid": str(e.args["checkpointCid"])}
                for e in self.index.events("CheckpointProposed", task=task_id, round_index=round_index)
            ],
            agreed_cid=str(agreed[-1].args["checkpointCid"]) if agreed else None,
        )
        self._note_outer_step(audit)
        if finalised and (self.rerun if rerun is None else rerun):
            try:
                self._recompute_checkpoint(audit, created, finalised[0])
            except OwnFault as error:
                audit.notes.append(f"could not recompute the next checkpoint: {error}")
        if evaluate_model and checkpoint_cid:
            audit.accuracy = self.accuracy(checkpoint_cid, str(created.args["envCid"]))
        return audit

    def _note_outer_step(self, audit: RoundAudit) -> None:
        """The agreed checkpoint's record of its outer step (which updates were clipped or trimmed), as notes:
        a large honest update is clipped too. A re-run recomputes the record with the checkpoint."""
        if audit.agreed_cid is None:
            return
        try:
            record = load_manifest(audit.agreed_cid, self.store).outer_step
        except CrucibleError as error:  # its own fault too: the round's audit goes on without the record
            audit.notes.append(f"could not read the agreed checkpoint {audit.agreed_cid}: {error}")
            return
        audit.outer_step = None if record is None else [note.model_dump() for note in record]
        audit.outer_step_notes = outer_step_lines(record)

    def _recompute_checkpoint(self, audit: RoundAudit, created: Event, finalised: Event) -> None:
        """The next checkpoint is the aggregate of the included updates; when agreed, it must be that."""
        if audit.agreed_cid is None:
            if any(not s.rejected for s in audit.submissions):
                audit.findings.append(Finding("checkpoint", "no checkpoint was agreed: the round kept its model"))
            return
        next_digest = str(finalised.args["nextCheckpoint"])
        if next_digest != "0x" + keccak(text=audit.agreed_cid).hex():
            audit.findings.append(Finding("checkpoint", f"the round finalised on {next_digest}, not the agreed CID"))
        spec = self.spec(str(created.args["envCid"]))
        loaded = self.models.get(audit.checkpoint_cid)
        included = [(s.submission, s.update_cid) for s in audit.submissions if not s.rejected]
        # The auditor's own fault propagates (`round` notes it); an unservable update is a finding.
        updates, unavailable = load_included_updates(included, self.store, self.device)
        for _, update_cid, error in unavailable:
            audit.findings.append(Finding("artifact", f"included update {update_cid}: {error}"))
        # Written where this auditor keeps its own files: relays take uploads only from staked signers.
        local = self.store.cache if isinstance(self.store, RelayStore) else self.store
        audit.recomputed_cid = publish_next_checkpoint(loaded, updates, spec.training, local)
        if audit.recomputed_cid != audit.agreed_cid:
            audit.findings.append(
                Finding(
                    "checkpoint",
                    f"the agreed checkpoint {audit.agreed_cid} is not the aggregate of the included updates "
                    f"({audit.recomputed_cid})",
                )
            )

    def accuracy(self, checkpoint_cid: str, env_cid: str) -> tuple[float, float]:
        """Held-out (greedy, sampled) accuracy of a checkpoint, computed once and cached in the index."""
        cached = self.index.evaluation(checkpoint_cid)
        if cached is not None:
            return cached
        loaded = self.models.get(checkpoint_cid)
        result = evaluate(loaded.model, loaded.tokenizer, self.spec(env_cid))
        self.index.record_evaluation(checkpoint_cid, result.accuracy, result.sampled_accuracy, result.problems)
        return result.accuracy, result.sampled_accuracy

    # ------------------------------------------------------------ tasks

    def task(self, task_id: int, rerun: bool | None = None, evaluate_model: bool = True) -> TaskAudit:
        """A whole task: every round, the accuracy of each checkpoint, and the money check."""
        created = self.created(task_id)
        state = self.crucible.task(task_id)
        opened = self.index.events("RoundOpened", task=task_id)
        rounds = [self.round(task_id, int(e.round or 0), rerun, evaluate_model) for e in opened]
        members = self.validators(task_id)
        trainers = {s.trainer for r in rounds for s in r.submissions}
        history = [
            e
            for e in self.index.events()
            if e.task == task_id or (e.contract == "StakeManager" and e.account in trainers | set(members))
        ]
        audit = TaskAudit(
            task_id=task_id,
            creator=str(created.args["creator"]),
            model_cid=str(created.args["modelCid"]),
            env_cid=str(created.args["envCid"]),
            params=TaskParams.from_contract(created.args["params"]),
            ended=state.ended,
            validators=members,
            history=history,
            rounds=rounds,
            money=money_check(self.crucible, self.index, task_id),
        )
        if not audit.money.balanced:
            audit.findings.append(
                Finding("money", f"in {audit.money.total_in} wei, out and held {audit.money.total_out} wei")
            )
        if state.ended and audit.rounds and audit.rounds[-1].agreed_cid and evaluate_model:
            final = audit.rounds[-1].agreed_cid
            audit.final_checkpoint = final
            audit.final_accuracy = self.accuracy(final, audit.env_cid)[0]
        return audit
