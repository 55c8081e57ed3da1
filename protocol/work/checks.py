"""The spec's checks of one submission, in order of cost, stopping at the first failure.

Each check is a function from bytes, tensors and parameters to a `CheckResult` (what it measured,
the thresholds, and for a failure where it failed); no chain and no network here. The validator,
a dispute committee member and the auditor all call `verify_submission`.

    availability → format (sizes, fields, commitment) → prompts → rewards
                 → toploc (one prefill pass) → sampling (replayed from the same pass) → update (replayed)
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from protocol.artifacts.manifest import Manifest, UpdateEncoding, load_manifest, load_state_dict
from protocol.artifacts.store import Store
from protocol.errors import ArtifactError, CrucibleError, OwnFault, VerificationError
from protocol.ml.compression import SUFFIXES, carried_residual, decode, encode, load_residual
from protocol.ml.envs.spec import EnvSpec
from protocol.ml.inference import Prefill, prefill
from protocol.ml.model import LoadedModel
from protocol.ml.proofs import chunk_count, proof_problem, verify_proofs
from protocol.ml.sampling import replay_many
from protocol.ml.tokenizer import completion_text, prompt_ids
from protocol.work.rollouts import RolloutFile, parse_rollouts
from protocol.work.round import RoundContext, Slot, assigned_slots, round_update

if TYPE_CHECKING:
    import torch

CHECKS = ("availability", "format", "prompts", "rewards", "toploc", "sampling", "update")
# Largest relative L2 error between a topk update's values and its re-encoding: honest work re-encodes
# bit for bit (0); this absorbs a float rounding that lands on a quantisation boundary, nothing more.
ENCODING_TOLERANCE = 1e-3
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


def check_format(data: bytes, claim: Claim, spec: EnvSpec) -> tuple[CheckResult, RolloutFile | None]:
    """Parses the rollout file and checks it belongs where the chain says: sizes, fields, commitment."""
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
    thresholds = {"samples": samples, "max_new_tokens": spec.sampling.max_new_tokens}
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
                failures.append({"sample": index, "position": position, "margin": _finite(margin)})
    passed = not failures and near_ties <= settings.max_sampling_mismatches
    figures = {
        "tokens": tokens,
        "mismatches": near_ties + len(failures),
        "near_ties": near_ties,
        "largest_margin": _finite(widest),
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


def _finite(value: float) -> float | str:
    """A float for JSON: infinities as strings."""
    return round(value, 6) if math.isfinite(value) else str(value)


def relative_errors(
    claimed: dict[str, torch.Tensor], replayed: dict[str, torch.Tensor]
) -> tuple[dict[str, float], list[str]]:
    """Relative L2 error ||claimed - replayed|| / max(||claimed||, ||replayed||, tiny) of each tensor
    (0 when equal, up to 2; a zero or unrelated update scores about 1), and the names that are missing,
    extra or of the wrong shape."""
    import torch

    errors: dict[str, float] = {}
    wrong = sorted(set(claimed) ^ set(replayed))
    for name, expected in replayed.items():
        got = claimed.get(name)
        if got is None:
            continue
        if got.shape != expected.shape:
            wrong.append(name)
            continue
        a, b = got.float().cpu(), expected.float().cpu()
        difference = torch.linalg.vector_norm(a - b)
        scale = torch.maximum(torch.linalg.vector_norm(a), torch.linalg.vector_norm(b)).clamp(min=1e-12)
        value = float(difference / scale)
        errors[name] = value if math.isfinite(value) else float("inf")
    return errors, wrong


def _beyond(errors: dict[str, float], wrong: list[str], tolerance: float) -> list[dict[str, Any]]:
    failures: list[dict[str, Any]] = [{"tensor": name, "reason": "missing, extra or misshapen"} for name in wrong]
    return failures + [
        {"tensor": name, "relative_error": _finite(error)}
        for name, error in sorted(errors.items(), key=lambda item: -item[1])
        if not error <= tolerance
    ]


def check_update(
    rollouts: RolloutFile,
    claimed: dict[str, torch.Tensor],
    loaded: LoadedModel,
    spec: EnvSpec,
    context: RoundContext,
    artifacts: Artifacts | None = None,
) -> CheckResult:
    """Replays the GRPO update (or LoRA adapter) from the checkpoint and the rollouts; compares tensor
    by tensor. A `topk` update is checked through its residuals (`check_encoded_update`)."""
    replayed = round_update(loaded, rollouts, spec, context)
    tolerance = spec.verification.update_tolerance
    if spec.training.encoding.kind == "topk":
        return check_encoded_update(claimed, replayed, spec, artifacts or Artifacts(lambda: b"", lambda: claimed))
    errors, wrong = relative_errors(claimed, replayed)
    failures = _beyond(errors, wrong, tolerance)
    worst = max(errors.values(), default=0.0)
    figures = {"tensors": len(replayed), "max_relative_error": _finite(worst)}
    reason = f"{len(failures)} tensors differ from the replayed update" if failures else ""
    return CheckResult("update", not failures, figures, {"update_tolerance": tolerance}, failures, reason)


def check_encoded_update(
    claimed: dict[str, torch.Tensor], replayed: dict[str, torch.Tensor], spec: EnvSpec, artifacts: Artifacts
) -> CheckResult:
    """A `topk` update E with its residuals: the one it started from must be the one the trainer's
    previous submission carried (`anchor`); the one it carries on, R', must make R' + decode(E) the
    replayed pseudo-gradient plus the residual it started from (within `update_tolerance`); and E must
    be the encoding of R' + decode(E), which is deterministic: honest work re-encodes bit for bit
    (`ENCODING_TOLERANCE` only absorbs float rounding at a quantisation boundary)."""
    import torch

    settings = spec.training.encoding
    replayed = {name: value.detach().float().cpu() for name, value in replayed.items()}
    thresholds = {"update_tolerance": spec.verification.update_tolerance, "encoding_tolerance": ENCODING_TOLERANCE}
    try:
        record = artifacts.encoding()
        expected = (settings.chunk, settings.keep, settings.bits)
        if record is None or (record.chunk, record.keep, record.bits) != expected:
            raise VerificationError(f"the update is not encoded topk chunk/keep/bits {expected} as the spec says")
        anchor = artifacts.anchor()
        if record.residual_base != anchor:
            raise VerificationError(
                f"it starts from residual {record.residual_base}, not {anchor}, the one the trainer's previous "
                "submission carried"
            )
        base = artifacts.residual(record.residual_base) if record.residual_base else {}
        carried = artifacts.residual(record.residual)
        decoded = decode(claimed, {name: value.shape for name, value in replayed.items()}, settings)
    except OwnFault:
        raise
    except CrucibleError as error:
        return CheckResult("update", False, {}, thresholds, [], f"encoded update: {error}")
    accumulated = {name: carried[name].float() + decoded[name] for name in decoded if name in carried}
    expected_sum = {name: value.float() + base[name].float() if name in base else value.float()
                    for name, value in replayed.items()}  # fmt: skip
    errors, wrong = relative_errors(accumulated, expected_sum)
    if base and set(base) != set(replayed):
        wrong = sorted({*wrong, *(set(base) ^ set(replayed))})
    failures = _beyond(errors, wrong, spec.verification.update_tolerance)
    again = encode(accumulated, settings)
    exact = sum(all(torch.equal(again[name + s], claimed[name + s]) for s in SUFFIXES) for name in accumulated)
    encoding_errors, _ = relative_errors(decode(again, {n: v.shape for n, v in accumulated.items()}, settings),
                                         {name: decoded[name] for name in accumulated})  # fmt: skip
    failures += [
        {"tensor": name, "reason": "not the encoding of its residual plus update", "relative_error": _finite(error)}
        for name, error in sorted(encoding_errors.items(), key=lambda item: -item[1])
        if not error <= ENCODING_TOLERANCE
    ]
    figures = {
        "tensors": len(replayed),
        "max_relative_error": _finite(max(errors.values(), default=0.0)),
        "re_encoded_bit_for_bit": exact,
        "max_encoding_error": _finite(max(encoding_errors.values(), default=0.0)),
    }
    reason = f"{len(failures)} tensors differ from the replayed, encoded update" if failures else ""
    return CheckResult("update", not failures, figures, thresholds, failures, reason)


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
        result, parsed[0] = check_format(data, claim, spec)
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
