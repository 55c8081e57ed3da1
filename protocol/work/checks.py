"""The spec's checks of one submission, in order of cost, stopping at the first failure.

Each check is a function from bytes, tensors and parameters to a `CheckResult` (what it measured,
the thresholds, and for a failure where it failed); no chain and no network here. The validator,
a dispute committee member and the auditor all call `verify_submission`.

    availability → format (sizes, fields, commitment) → prompts → rewards
                 → toploc (one prefill pass) → sampling (replayed from the same pass) → update (replayed)
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from protocol.artifacts.manifest import Manifest, UpdateEncoding, load_manifest, load_state_dict
from protocol.artifacts.store import Store
from protocol.errors import ArtifactError, CrucibleError, OwnFault
from protocol.ml.compression import carried_residual, load_residual
from protocol.ml.envs.spec import EnvSpec
from protocol.ml.inference import Prefill, prefill
from protocol.ml.model import LoadedModel
from protocol.ml.proofs import chunk_count, proof_problem, verify_proofs
from protocol.ml.sampling import replay_many
from protocol.ml.tokenizer import completion_text, prompt_ids
from protocol.work.results import CheckResult, finite
from protocol.work.rollouts import RolloutFile, parse_rollouts
from protocol.work.round import RoundContext, Slot, assigned_slots
from protocol.work.update_checks import check_update

if TYPE_CHECKING:
    import torch

CHECKS = ("availability", "format", "prompts", "rewards", "toploc", "sampling", "update")


@dataclass(frozen=True)
class Claim:
    """What the chain says of a submission: where it belongs and what its trainer committed to."""

    context: RoundContext
    rollout_cid: str
    update_cid: str
    work_units: int
    commitment: bytes


@dataclass
class Verdict:
    """Every check run on a submission, in order; valid when all passed."""

    results: list[CheckResult]

    @property
    def valid(self) -> bool:
        """Whether every check that ran passed (the last one ran only if all before it passed)."""
        return all(result.passed for result in self.results)

    @property
    def failed_check(self) -> str | None:
        """The name of the check that failed, or None."""
        return next((r.check for r in self.results if not r.passed), None)


def _no_residual(cid: str) -> dict[str, torch.Tensor]:
    raise ArtifactError(f"no store to fetch residual {cid} from")


@dataclass
class Artifacts:
    """How the checks get a submission's bytes: each loader raises ArtifactError when the bytes are
    unavailable or not what was claimed, OwnFault when the reader itself failed. For a `topk` update:
    `encoding` is its manifest's record of it, `residual(cid)` loads a residual manifest, `anchor` is
    the residual the trainer's previous submission in the task carried (None: it has none)."""

    rollout_bytes: Callable[[], bytes]
    update: Callable[[], dict[str, torch.Tensor]]
    encoding: Callable[[], UpdateEncoding | None] = lambda: None
    residual: Callable[[str], dict[str, torch.Tensor]] = _no_residual
    anchor: Callable[[], str | None] = lambda: None


def claim_of(submitted: dict[str, Any], context: RoundContext) -> Claim:
    """The claim a WorkSubmitted event makes, in the round `context` describes."""
    return Claim(context, str(submitted["rolloutCid"]), str(submitted["updateCid"]), int(submitted["workUnits"]),
                 _bytes(submitted["commitment"]))  # fmt: skip


def _bytes(value: Any) -> bytes:
    return bytes.fromhex(value[2:]) if isinstance(value, str) else bytes(value)


def stored_artifacts(
    claim: Claim, store: Store, device: str, previous_update: Callable[[], str | None] = lambda: None
) -> Artifacts:
    """A submission's artifacts from a store (fetched by CID and checked against it on the way in); the
    update must be a manifest of kind "update" whose parent is the round's checkpoint.
    `previous_update` gives the update CID of the trainer's previous submission in the task (None:
    none), whose manifest names the residual this one must start from."""

    @functools.cache  # read once for both the update and its encoding record
    def manifest() -> Manifest:
        found = load_manifest(claim.update_cid, store)
        if found.kind != "update" or found.parent != claim.context.checkpoint_cid:
            raise ArtifactError(f"{claim.update_cid} is not an update of {claim.context.checkpoint_cid}")
        return found

    def update() -> dict[str, torch.Tensor]:
        manifest()
        return load_state_dict(claim.update_cid, store, device=device)

    return Artifacts(
        lambda: store.get(claim.rollout_cid),
        update,
        lambda: manifest().encoding,
        lambda cid: load_residual(cid, store),
        lambda: carried_residual(previous_update(), store),
    )


def _fail(check: str, reason: str, **figures: Any) -> CheckResult:
    return CheckResult(check, False, figures=figures, reason=reason)


# ---------------------------------------------------------------------------- cheap checks


def stop_problem(completion_ids: list[int], eos_id: int, max_new_tokens: int) -> str | None:
    """Why a completion does not stop where the sampler stops (at its first end token, else at `max_new_tokens`),
    or None. Tokens past an end token would be work units the sampler never made (and text the update trains
    on); a completion cut short of both would read its reward off text the sampler had not finished."""
    if eos_id in completion_ids[:-1]:
        return f"an end token at position {completion_ids.index(eos_id)} of {len(completion_ids)}"
    if completion_ids[-1] != eos_id and len(completion_ids) < max_new_tokens:
        return f"stops at {len(completion_ids)} tokens, without an end token and short of {max_new_tokens}"
    return None


def check_format(data: bytes, claim: Claim, spec: EnvSpec, eos_id: int) -> tuple[CheckResult, RolloutFile | None]:
    """Parses the rollout file and checks it belongs where the chain says: sizes, fields, commitment, and that
    every completion stops where the sampler stops (`eos_id`: the model's end token)."""
    try:
        rollouts = parse_rollouts(data, claim.rollout_cid)
    except CrucibleError as error:
        return _fail("format", str(error), bytes=len(data)), None
    context = claim.context
    expected = {
        "chain_id": context.chain_id,
        "market": context.market,
        "task_id": context.task_id,
        "round": context.round_index,
        "node": context.node,
        "checkpoint_cid": context.checkpoint_cid,
        "env_cid": context.env_cid,
        "work_seed": "0x" + context.work_seed.hex(),
        "work_units": claim.work_units,
    }
    found = rollouts.model_dump(include=set(expected))
    failures = [
        {"field": name, "expected": value, "found": found[name]}
        for name, value in expected.items()
        if str(found[name]).lower() != str(value).lower()
    ]
    samples = spec.training.prompts_per_round * spec.training.group_size
    if len(rollouts.samples) != samples:
        failures.append({"field": "samples", "expected": samples, "found": len(rollouts.samples)})
    for index, sample in enumerate(rollouts.samples):
        if len(sample.completion_ids) > spec.sampling.max_new_tokens:
            failures.append({"sample": index, "field": "completion_ids", "found": len(sample.completion_ids)})
        elif stop := stop_problem(sample.completion_ids, eos_id, spec.sampling.max_new_tokens):
            failures.append({"sample": index, "field": "completion_ids", "found": stop})
        if len(sample.proofs) != chunk_count(len(sample.completion_ids), spec.toploc):
            failures.append({"sample": index, "field": "proofs", "found": len(sample.proofs)})
        problems = [problem for proof in sample.proof_bytes() if (problem := proof_problem(proof, spec.toploc))]
        if problems:
            failures.append({"sample": index, "field": "proofs", "found": problems[0]})
    digest = rollouts.proofs_digest()
    bound = context.commitment(digest)
    if bound != claim.commitment:
        failures.append({"field": "commitment", "expected": "0x" + claim.commitment.hex(), "found": "0x" + bound.hex()})
    figures = {"bytes": len(data), "samples": len(rollouts.samples), "work_units": rollouts.work_units}
    thresholds = {"samples": samples, "max_new_tokens": spec.sampling.max_new_tokens, "eos_id": eos_id}
    reason = f"{failures[0]} does not match the chain or the spec" if failures else ""
    return CheckResult("format", not failures, figures, thresholds, failures, reason), rollouts


def check_prompts(rollouts: RolloutFile, slots: list[Slot], loaded: LoadedModel) -> CheckResult:
    """Checks each sample answers the prompt and carries the seed the chain assigns to its slot
    (`slots`: `assigned_slots` of the submission's round context)."""
    failures = []
    for index, (slot, sample) in enumerate(zip(slots, rollouts.samples, strict=True)):
        wanted = (slot.prompt_index, slot.sample_index, slot.problem.prompt, "0x" + slot.seed.hex())
        got = (sample.prompt_index, sample.sample_index, sample.prompt, sample.seed)
        if wanted != got or sample.prompt_ids != prompt_ids(loaded.tokenizer, slot.problem):
            failures.append({"sample": index, "expected_prompt": slot.problem.prompt, "found_prompt": sample.prompt})
    reason = f"{len(failures)} samples are not the assigned prompt or seed" if failures else ""
    return CheckResult("prompts", not failures, {"samples": len(rollouts.samples)}, {}, failures, reason)


def check_rewards(rollouts: RolloutFile, slots: list[Slot], spec: EnvSpec, loaded: LoadedModel) -> CheckResult:
    """Recomputes every reward (and the completion text) from the completion's token ids."""
    environment = spec.env()
    vocabulary = int(loaded.model.config.vocab_size)
    failures: list[dict[str, Any]] = []
    for index, (slot, sample) in enumerate(zip(slots, rollouts.samples, strict=True)):
        outside = [token for token in sample.completion_ids if not 0 <= token < vocabulary]
        if outside:
            failures.append({"sample": index, "reason": f"token {outside[0]} outside the vocabulary of {vocabulary}"})
            continue
        text = completion_text(loaded.tokenizer, sample.completion_ids)
        reward = environment.reward(slot.problem, text)
        if text != sample.completion or not math.isclose(reward, sample.reward, abs_tol=1e-9):
            failures.append({"sample": index, "expected": reward, "found": sample.reward, "completion": text})
    figures = {"claimed_mean": _mean([s.reward for s in rollouts.samples]), "wrong": len(failures)}
    reason = f"{len(failures)} rewards or texts differ from the environment's" if failures else ""
    return CheckResult("rewards", not failures, figures, {"abs_tol": 1e-9}, failures, reason)


def _mean(values: list[float]) -> float:
    return round(sum(values) / len(values), 6) if values else 0.0


# ---------------------------------------------------------------------------- model checks


def run_prefill(rollouts: RolloutFile, loaded: LoadedModel, micro_batch: int = 16) -> list[Prefill]:
    """One prefill pass of the round's checkpoint over every sample (activations and logits)."""
    pairs = [(sample.prompt_ids, sample.completion_ids) for sample in rollouts.samples]
    return prefill(loaded.model, pairs, loaded.tokenizer.pad_id, micro_batch)


def check_toploc(rollouts: RolloutFile, passes: list[Prefill], spec: EnvSpec) -> CheckResult:
    """Verifies every sample's TOPLOC proofs against the recomputed hidden states."""
    settings = spec.toploc
    failures: list[dict[str, Any]] = []
    worst_exp, worst_mean, worst_median, chunks = 0, 0.0, 0.0, 0
    for index, (sample, recomputed) in enumerate(zip(rollouts.samples, passes, strict=True)):
        try:
            figures = verify_proofs(recomputed.activations, sample.proof_bytes(), settings)
        except CrucibleError as error:
            failures.append({"sample": index, "reason": str(error)})
            continue
        for chunk, result in enumerate(figures):
            chunks += 1
            worst_exp = max(worst_exp, result.exp_mismatches)
            worst_mean = max(worst_mean, result.mantissa_err_mean)
            worst_median = max(worst_median, result.mantissa_err_median)
            if not result.passes(settings):
                failures.append(
                    {
                        "sample": index,
                        "chunk": chunk,
                        "exp_mismatches": result.exp_mismatches,
                        "mantissa_err_mean": round(result.mantissa_err_mean, 4),
                        "mantissa_err_median": round(result.mantissa_err_median, 4),
                    }
                )
    figures_out = {
        "chunks": chunks,
        "max_exp_mismatches": worst_exp,
        "max_mantissa_err_mean": round(worst_mean, 4),
        "max_mantissa_err_median": round(worst_median, 4),
    }
    thresholds = {
        "topk": settings.topk,
        "max_exp_mismatches": settings.max_exp_mismatches,
        "max_mantissa_err_mean": settings.max_mantissa_err_mean,
        "max_mantissa_err_median": settings.max_mantissa_err_median,
    }
    reason = f"{len(failures)} proof chunks outside the thresholds" if failures else ""
    return CheckResult("toploc", not failures, figures_out, thresholds, failures, reason)


def check_sampling(rollouts: RolloutFile, passes: list[Prefill], spec: EnvSpec) -> CheckResult:
    """Replays every token from the prefill logits and its seed: a mismatch beyond the near-tie
    margin, or more near-tie mismatches than allowed, fails."""
    settings = spec.verification
    failures: list[dict[str, Any]] = []
    near_ties, tokens, widest = 0, 0, 0.0
    replays = replay_many(
        [recomputed.logits for recomputed in passes],
        [bytes.fromhex(sample.seed[2:]) for sample in rollouts.samples],
        [sample.completion_ids for sample in rollouts.samples],
        spec.sampling,
    )
    for index, result in enumerate(replays):
        tokens += result.tokens
        for position, margin in zip(result.mismatches, result.margins, strict=True):
            widest = max(widest, margin)
            if margin <= settings.near_tie_margin:
                near_ties += 1
            else:
                failures.append({"sample": index, "position": position, "margin": finite(margin)})
    passed = not failures and near_ties <= settings.max_sampling_mismatches
    figures = {
        "tokens": tokens,
        "mismatches": near_ties + len(failures),
        "near_ties": near_ties,
        "largest_margin": finite(widest),
    }
    thresholds = {
        "near_tie_margin": settings.near_tie_margin,
        "max_sampling_mismatches": settings.max_sampling_mismatches,
    }
    if failures:
        reason = f"{len(failures)} tokens are not what their seed samples (beyond the near-tie margin)"
    else:
        reason = "" if passed else f"{near_ties} near-tie mismatches, above {settings.max_sampling_mismatches}"
    return CheckResult("sampling", passed, figures, thresholds, failures, reason)


# ---------------------------------------------------------------------------- all of them


def verify_submission(claim: Claim, spec: EnvSpec, loaded: LoadedModel, artifacts: Artifacts) -> Verdict:
    """Runs the checks in order of cost and stops at the first failure. Only what the submitter controls
    fails it: bytes no answering source serves, bytes that contradict the commitments, checks that fail
    on intact bytes. The verifier's own fault (a damaged local copy, no source reachable, its disk) is
    raised as OwnFault and is no verdict at all."""
    results: list[CheckResult] = []

    def timed(run: Callable[[], CheckResult]) -> bool:
        started = time.perf_counter()
        result = run()
        result.seconds = time.perf_counter() - started
        results.append(result)
        return result.passed

    started = time.perf_counter()
    try:
        data = artifacts.rollout_bytes()
    except OwnFault:
        raise  # the verifier's own fault says nothing of the submission
    except CrucibleError as error:
        results.append(_fail("availability", f"rollout file: {error}"))
        return Verdict(results)
    results.append(CheckResult("availability", True, {"rollout_bytes": len(data)}))
    results[-1].seconds = time.perf_counter() - started

    parsed: list[RolloutFile | None] = [None]

    def format_check() -> CheckResult:
        result, parsed[0] = check_format(data, claim, spec, loaded.tokenizer.eos_id)
        return result

    if not timed(format_check):
        return Verdict(results)
    rollouts = parsed[0]
    assert rollouts is not None
    slots = assigned_slots(spec, claim.context)
    if not timed(lambda: check_prompts(rollouts, slots, loaded)):
        return Verdict(results)
    if not timed(lambda: check_rewards(rollouts, slots, spec, loaded)):
        return Verdict(results)
    started = time.perf_counter()
    passes = run_prefill(rollouts, loaded)
    prefill_s = time.perf_counter() - started
    if not timed(lambda: check_toploc(rollouts, passes, spec)):
        results[-1].seconds += prefill_s
        return Verdict(results)
    results[-1].seconds += prefill_s
    if not timed(lambda: check_sampling(rollouts, passes, spec)):
        return Verdict(results)

    def update_check() -> CheckResult:
        try:
            claimed = artifacts.update()
        except OwnFault:
            raise
        except CrucibleError as error:
            return _fail("update", f"update manifest: {error}")
        return check_update(rollouts, claimed, loaded, spec, claim.context, artifacts)

    timed(update_check)
    return Verdict(results)
