"""The outer step: the next checkpoint from the round's checkpoint and its included updates.

DiLoCo with an SGD outer optimizer: next = C + lr * agg(Δ_i) (a LoRA update's Δ_i is its adapters'
folded weight change, a topk update's its decoded values), where `agg` is the spec's rule
(`training.aggregation`): the plain mean; `clipped_mean`, every Δ_i first scaled to a norm of at most
`clip_multiple` times the round's median norm, then the mean; or `trimmed_mean`, clipped the same way, then
in every coordinate the `trim` largest and smallest values dropped before the mean. A sampled check never
sees most updates at a low sample rate: the clip bounds what one unchecked update can move, whatever it holds.

Deterministic to the bit on one kind of device: updates are taken in a canonical order (by submission id),
sums run in that order, and norms are float64 sums of squares by numpy's pairwise summation (one thread,
fixed order), summed over tensors in name order. No outer optimizer state is kept (momentum would live in
the checkpoint manifest). docs/protocol.md ("The outer step") gives the bound a steady pusher can move.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from protocol.artifacts.manifest import OuterStepNote, load_state_dict, own_tensors, save_state_dict
from protocol.artifacts.store import Store
from protocol.errors import CrucibleError, OwnFault, VerificationError
from protocol.ml.adapters import weight_deltas
from protocol.ml.compression import decode
from protocol.ml.envs.spec import TrainingSettings

if TYPE_CHECKING:
    import torch

    from protocol.ml.model import LoadedModel


def load_included_updates(
    included: Iterable[tuple[int, str]], store: Store, device: str = "cpu"
) -> tuple[list[tuple[int, dict[str, torch.Tensor]]], list[tuple[int, str, CrucibleError]]]:
    """Loads a round's included updates, `(submission id, update CID)` each, checked against their CIDs.
    Returns those loaded and those nobody could serve sound (`(id, CID, error)`: the caller says so
    and aggregates without them). The caller's own fault (its disk, no source reachable) propagates:
    an aggregate missing an update for that reason would disagree with every sound one."""
    loaded: list[tuple[int, dict[str, torch.Tensor]]] = []
    unavailable: list[tuple[int, str, CrucibleError]] = []
    for submission, update_cid in included:
        try:
            loaded.append((submission, load_state_dict(update_cid, store, device=device)))
        except OwnFault:
            raise
        except CrucibleError as error:
            unavailable.append((submission, update_cid, error))
    return loaded, unavailable


@dataclass(frozen=True)
class OuterStep:
    """The next checkpoint's tensors and, for a robust rule, how it treated each update (None: plain mean)."""

    state: dict[str, torch.Tensor]
    notes: list[OuterStepNote] | None


def update_norm(delta: dict[str, torch.Tensor]) -> float:
    """The L2 norm over every tensor of a dense delta: float64 squares summed by numpy's pairwise summation
    (single-threaded, a fixed order: the same bits whatever the thread count), tensors in name order."""
    import numpy as np
    import torch

    total = 0.0
    for name in sorted(delta):
        values = delta[name].detach().to("cpu", torch.float64).numpy().ravel()
        total += float(np.add.reduce(values * values))
    return math.sqrt(total)


def clip_scales(norms: list[float], clip_multiple: float) -> list[float]:
    """Each update's factor under the norm bound `clip_multiple` x the median norm (the mean of the two middle
    ones for an even count): 1 at or under it, bound / norm above it."""
    ordered = sorted(norms)
    middle = len(ordered) // 2
    median = ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2
    bound = clip_multiple * median
    return [1.0 if norm <= bound else bound / norm for norm in norms]


def trimmed_count(updates: int, trim: int) -> int:
    """Values dropped at each end of a coordinate: `trim`, or fewer so that at least one is left."""
    return min(trim, (updates - 1) // 2)


def outer_step_lines(notes: list[OuterStepNote] | None) -> list[str]:
    """One line per update the outer step clipped or trimmed (for `audit round` and the explorer): notes, not
    findings — a large honest update is clipped too."""
    lines = []
    for note in notes or []:
        treated = []
        if note.scale < 1:
            treated.append(f"clipped to {note.scale:.3g} of its norm {note.norm:.4g}")
        if note.trimmed_share > 0:
            treated.append(f"{note.trimmed_share:.1%} of its values trimmed")
        if treated:
            lines.append(f"outer step: submission {note.submission}'s update {' and '.join(treated)}")
    return lines


def aggregate(
    checkpoint: dict[str, torch.Tensor],
    updates: list[tuple[int, dict[str, torch.Tensor]]],
    training: TrainingSettings,
) -> OuterStep:
    """Returns C + lr * agg(Δ) over `(submission id, Δ)` pairs by the spec's aggregation rule (the checkpoint
    itself when there are none). A LoRA update's Δ is its adapters' weight change, (alpha / r) B A on each
    adapted weight: the norm and the clip are the folded change's, what the update does to the model (the
    factors' own norms are not: B c and A / c fold to the same change). A weight an update leaves alone
    counts as zero in it."""
    import torch

    if not updates:
        return OuterStep({name: value.clone() for name, value in checkpoint.items()}, None)
    lora = training.adapter.kind == "lora"
    rule = training.aggregation
    shapes = {name: value.shape for name, value in checkpoint.items()}

    def dense(delta: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        if lora:
            return weight_deltas(delta, training.adapter)
        return decode(delta, shapes, training.encoding) if training.encoding.kind == "topk" else delta

    ids, ordered = zip(*[(sid, dense(delta)) for sid, delta in sorted(updates, key=lambda pair: pair[0])], strict=True)
    for delta in ordered:
        unknown = sorted(set(delta) - set(checkpoint))
        if unknown:
            raise VerificationError(f"an update names {unknown[0]}, which the checkpoint does not have")
        for name, value in delta.items():
            if value.shape != shapes[name]:
                raise VerificationError(f"an update's {name} is not of shape {list(shapes[name])}")
        if not lora and len(delta) != len(checkpoint):
            missing = sorted(set(checkpoint) - set(delta))[0]
            raise VerificationError(f"an update lacks tensor {missing} of shape {list(shapes[missing])}")
    count = len(ordered)
    if rule.rule == "mean":
        scales, trim = [1.0] * count, 0
        notes = None
    else:
        norms = [update_norm(delta) for delta in ordered]
        scales = clip_scales(norms, rule.clip_multiple)
        trim = trimmed_count(count, rule.trim) if rule.rule == "trimmed_mean" else 0
        dropped = [0] * count
    kept = count - 2 * trim
    result, values = {}, 0
    for name, value in checkpoint.items():
        parts = [
            (delta[name].float() if scale == 1.0 else delta[name].float() * scale) if name in delta else None
            for delta, scale in zip(ordered, scales, strict=True)
        ]
        total = torch.zeros_like(value, dtype=torch.float32)
        # A weight no update touches (LoRA's untargeted ones) stays zero and counts for no one's trimmed share.
        if trim and any(part is not None for part in parts):
            stacked = torch.stack([torch.zeros_like(total) if part is None else part for part in parts])
            ranked, order = torch.sort(stacked, dim=0, stable=True)
            for rank in range(trim, count - trim):
                total += ranked[rank]
            for rank in (*range(trim), *range(count - trim, count)):
                for position, times in enumerate(torch.bincount(order[rank].flatten(), minlength=count).tolist()):
                    dropped[position] += times
            values += value.numel()
        else:
            for part in parts:
                if part is not None:
                    total += part
        result[name] = (value.float() + training.outer_learning_rate * total / kept).to(value.dtype)
    if rule.rule != "mean":
        notes = [
            OuterStepNote(submission=hex(sid), norm=norm, scale=scale,
                          trimmed_share=dropped[index] / values if values else 0.0)
            for index, (sid, norm, scale) in enumerate(zip(ids, norms, scales, strict=True))
        ]  # fmt: skip
    return OuterStep(result, notes)


def publish_next_checkpoint(
    loaded: LoadedModel, updates: list[tuple[int, dict[str, torch.Tensor]]], training: TrainingSettings, store: Store
) -> str:
    """Stores the aggregate of the round's checkpoint `loaded` and its included updates as a checkpoint
    manifest whose parent is the round's checkpoint; returns its CID. `loaded.model` is left unchanged."""
    step = aggregate(own_tensors(loaded.model), updates, training)  # new tensors: the model is not touched
    return save_state_dict(step.state, store, "checkpoint", model_config=loaded.model.config.to_dict(),
                           parent=loaded.checkpoint_cid, outer_step=step.notes)  # fmt: skip
