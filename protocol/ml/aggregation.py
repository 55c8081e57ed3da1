"""The outer step: the next checkpoint from the round's checkpoint and its included updates.

DiLoCo with an SGD outer optimizer: next = C + lr * mean(Δ_i) (a LoRA update's Δ_i is its adapters'
weight change, a topk update's its decoded values), the mean taken in a canonical
order (by submission id) so every aggregator computes the same bytes up to float summation,
which a fixed order removes on one device. No outer optimizer state is kept (momentum would live
in the checkpoint manifest).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from protocol.artifacts.manifest import load_state_dict, own_tensors, save_state_dict
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


def aggregate(
    checkpoint: dict[str, torch.Tensor],
    updates: list[tuple[int, dict[str, torch.Tensor]]],
    training: TrainingSettings,
) -> dict[str, torch.Tensor]:
    """Returns C + lr * mean(Δ) over `(submission id, Δ)` pairs (the checkpoint itself when there are
    none). A LoRA update's Δ is its adapters' weight change, (alpha / r) B A on each adapted weight."""
    import torch

    if not updates:
        return {name: value.clone() for name, value in checkpoint.items()}
    lora = training.adapter.kind == "lora"
    shapes = {name: value.shape for name, value in checkpoint.items()}

    def dense(delta: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        if lora:
            return weight_deltas(delta, training.adapter)
        return decode(delta, shapes, training.encoding) if training.encoding.kind == "topk" else delta

    ordered = [dense(delta) for _, delta in sorted(updates, key=lambda pair: pair[0])]
    result = {}
    for name, value in checkpoint.items():
        total = torch.zeros_like(value, dtype=torch.float32)
        for delta in ordered:
            if name not in delta:
                if lora:
                    continue  # a weight no adapter touches
                raise VerificationError(f"an update lacks tensor {name} of shape {list(value.shape)}")
            if delta[name].shape != value.shape:
                raise VerificationError(f"an update's {name} is not of shape {list(value.shape)}")
            total += delta[name].float()
        result[name] = (value.float() + training.outer_learning_rate * total / len(ordered)).to(value.dtype)
    unknown = sorted({name for delta in ordered for name in delta} - set(checkpoint))
    if unknown:
        raise VerificationError(f"an update names {unknown[0]}, which the checkpoint does not have")
    return result


def publish_next_checkpoint(
    loaded: LoadedModel, updates: list[tuple[int, dict[str, torch.Tensor]]], training: TrainingSettings, store: Store
) -> str:
    """Stores the aggregate of the round's checkpoint `loaded` and its included updates as a checkpoint
    manifest whose parent is the round's checkpoint; returns its CID. `loaded.model` is left unchanged."""
    state = aggregate(own_tensors(loaded.model), updates, training)  # new tensors: the model is not touched
    return save_state_dict(state, store, "checkpoint", model_config=loaded.model.config.to_dict(),
                           parent=loaded.checkpoint_cid)  # fmt: skip
