"""The update check: the trainer's update replayed from the checkpoint and its rollouts, compared tensor
by tensor; a `topk` update (protocol.ml.compression) through the residuals it names."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from protocol.errors import CrucibleError, OwnFault, VerificationError
from protocol.ml.compression import SUFFIXES, decode, encode
from protocol.ml.envs.spec import EnvSpec
from protocol.ml.model import LoadedModel
from protocol.work.results import CheckResult, finite
from protocol.work.rollouts import RolloutFile
from protocol.work.round import RoundContext, round_update

if TYPE_CHECKING:
    import torch

    from protocol.work.checks import Artifacts

# Largest relative L2 error between a topk update's values and its re-encoding: honest work re-encodes
# bit for bit (0); this absorbs a float rounding that lands on a quantisation boundary, nothing more.
ENCODING_TOLERANCE = 1e-3


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
        {"tensor": name, "relative_error": finite(error)}
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
    if spec.training.encoding.kind == "topk":
        if artifacts is None:
            raise ValueError("a topk update is checked with its artifacts: the residuals it names")
        return check_encoded_update(claimed, replayed, spec, artifacts)
    tolerance = spec.verification.update_tolerance
    errors, wrong = relative_errors(claimed, replayed)
    failures = _beyond(errors, wrong, tolerance)
    worst = max(errors.values(), default=0.0)
    figures = {"tensors": len(replayed), "max_relative_error": finite(worst)}
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
        {"tensor": name, "reason": "not the encoding of its residual plus update", "relative_error": finite(error)}
        for name, error in sorted(encoding_errors.items(), key=lambda item: -item[1])
        if not error <= ENCODING_TOLERANCE
    ]
    figures = {
        "tensors": len(replayed),
        "max_relative_error": finite(max(errors.values(), default=0.0)),
        "re_encoded_bit_for_bit": exact,
        "max_encoding_error": finite(max(encoding_errors.values(), default=0.0)),
    }
    reason = f"{len(failures)} tensors differ from the replayed, encoded update" if failures else ""
    return CheckResult("update", not failures, figures, thresholds, failures, reason)
