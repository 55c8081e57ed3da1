"""The outer step's robust rules (protocol/ml/aggregation.py): what one unchecked update can move, the same bits
on every process and thread count, honest rounds left as they were, and the notes a checkpoint carries."""

from __future__ import annotations

import hashlib
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from protocol.artifacts.manifest import load_manifest, save_state_dict
from protocol.artifacts.store import LocalStore
from protocol.ml.aggregation import aggregate, update_norm
from protocol.ml.envs.spec import AdapterSettings, AggregationSettings, TrainingSettings

# One tensor large enough that torch would split a reduction over it among threads.
SHAPES = {"a.weight": (64, 48), "b.weight": (300,), "c.weight": (32, 32), "d.weight": (1024, 2048)}


def training(rule: str = "clipped_mean", clip: float = 2.0, trim: int = 1, lr: float = 1.0) -> TrainingSettings:
    return TrainingSettings(
        outer_learning_rate=lr, aggregation=AggregationSettings(rule=rule, clip_multiple=clip, trim=trim)
    )


def random_delta(seed: int, norm: float) -> dict[str, torch.Tensor]:
    """A dense delta of exactly `norm` (up to float rounding), drawn from `seed`."""
    generator = torch.Generator().manual_seed(seed)
    delta = {name: torch.randn(shape, generator=generator) for name, shape in SHAPES.items()}
    factor = norm / update_norm(delta)
    return {name: value * factor for name, value in delta.items()}


def checkpoint() -> dict[str, torch.Tensor]:
    return {name: torch.zeros(shape) for name, shape in SHAPES.items()}


def flat(state: dict[str, torch.Tensor]) -> torch.Tensor:
    return torch.cat([state[name].flatten().double() for name in sorted(state)])


HONEST = [random_delta(seed, norm) for seed, norm in ((1, 1.0), (2, 1.3), (3, 0.8), (4, 1.1))]


def poison(kind: str, honest: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """The strategies of an unchecked poisoner: scaled x100, the honest mean sign-flipped and scaled, random
    at the honest norm, and a steady push just under the clipping bound."""
    mean = {name: sum(delta[name] for delta in honest) / len(honest) for name in SHAPES}
    if kind == "scaled":
        return {name: 100 * value for name, value in honest[0].items()}
    if kind == "sign_flipped":
        return {name: -50 * value for name, value in mean.items()}
    if kind == "random":
        return random_delta(99, update_norm(honest[0]))
    direction = random_delta(7, 1.0)  # "steady": the same direction every round, at 1.9 x a typical norm
    return {name: 1.9 * value for name, value in direction.items()}


@pytest.mark.parametrize("trainers", [3, 5])
@pytest.mark.parametrize("kind", ["scaled", "sign_flipped", "random", "steady"])
def test_one_unchecked_update_moves_the_checkpoint_at_most_the_bound(trainers: int, kind: str) -> None:
    """With one poisoner among n included updates, the clipped mean moves at most `lr * c * m / n` away from
    what the honest updates alone contribute, `m` the round's median norm — which, the poisoner being one of
    n >= 3, lies within the honest norms: the bound is at most `lr * c * max honest norm / n`
    (docs/protocol.md, "The outer step"). The plain mean is not bounded. Broken version: make `clip_scales`
    return all ones (no clipping) and the scaled and sign-flipped cases fail."""
    honest = HONEST[: trainers - 1]
    bad = poison(kind, honest)
    lr, clip = 0.7, 2.0
    updates = [(index, delta) for index, delta in enumerate([*honest, bad])]
    step = aggregate(checkpoint(), updates, training(clip=clip, lr=lr))
    assert step.notes is not None
    scales = [note.scale for note in step.notes]
    honest_part = sum(scales[i] * flat(delta) for i, delta in enumerate(honest)) * lr / trainers
    moved = float((flat(step.state) - honest_part).norm())
    norms = sorted(note.norm for note in step.notes)
    median = norms[trainers // 2]
    assert moved <= lr * clip * median / trainers * (1 + 1e-5)
    assert median <= max(update_norm(delta) for delta in honest) * (1 + 1e-6)
    if kind in ("scaled", "sign_flipped"):
        assert scales[-1] < 0.1 and all(scale == 1.0 for scale in scales[:-1]), "only the poison is clipped"
        plain = aggregate(checkpoint(), updates, training(rule="mean", lr=lr)).state
        honest_mean_part = sum(flat(delta) for delta in honest) * lr / trainers
        assert float((flat(plain) - honest_mean_part).norm()) > 10 * lr * clip * median / trainers, "unbounded"


def test_an_honest_round_is_left_as_the_mean_and_a_large_honest_update_is_only_noted() -> None:
    """Honest updates within `c` times the median are not touched: the clipped mean is the plain mean, bit for
    bit. A large honest one is clipped and noted — a note, not a finding. Broken version: clip around the mean
    norm instead of the median and the first assertion fails (the 1.9 update drags the bound)."""
    updates = list(enumerate([random_delta(11, 1.0), random_delta(12, 1.9), random_delta(13, 1.2)]))
    robust = aggregate(checkpoint(), updates, training(clip=1.5))
    assert robust.notes is not None and [note.scale for note in robust.notes] == [1.0, pytest.approx(1.8 / 1.9), 1.0]
    updates = list(enumerate([random_delta(11, 1.0), random_delta(12, 1.5), random_delta(13, 1.2)]))
    plain = aggregate(checkpoint(), updates, training(rule="mean")).state
    robust = aggregate(checkpoint(), updates, training(clip=1.5))
    assert all(torch.equal(plain[name], robust.state[name]) for name in SHAPES)
    assert robust.notes is not None and all(note.scale == 1.0 for note in robust.notes)
    assert [note.submission for note in robust.notes] == ["0x0", "0x1", "0x2"]


def test_the_trimmed_mean_drops_the_ends_of_every_coordinate_and_notes_whose() -> None:
    """trimmed_mean with three updates and trim 1 is the coordinate-wise median of the clipped updates; each
    coordinate drops two values, so the notes' trimmed shares add up to two. With two updates nothing is
    trimmed (at least one value is left). Broken version: drop `trimmed_count`'s cap and the two updates' mean
    is taken over no values (not finite)."""
    updates = list(enumerate(HONEST[:3]))
    step = aggregate(checkpoint(), updates, training(rule="trimmed_mean", clip=100.0))
    stacked = torch.stack([flat(delta) for delta in HONEST[:3]]).float()
    assert torch.equal(flat(step.state).float(), stacked.median(dim=0).values)
    assert step.notes is not None and math.isclose(sum(note.trimmed_share for note in step.notes), 2.0)
    pair = aggregate(checkpoint(), updates[:2], training(rule="trimmed_mean", clip=100.0))
    mean = aggregate(checkpoint(), updates[:2], training(rule="mean")).state
    assert all(torch.allclose(pair.state[name], mean[name]) for name in SHAPES)
    assert pair.notes is not None and all(note.trimmed_share == 0 for note in pair.notes)


def test_a_lora_update_is_clipped_by_what_it_does_to_the_model() -> None:
    """The norm is the folded change's, (alpha / r) B A: rescaling B by c and A by 1 / c changes the factors'
    norms, not the update, and not its clip. Broken version: take the norm over the adapter tensors as sent
    and the large update's two scales differ (eightfold)."""
    settings = TrainingSettings(adapter=AdapterSettings(kind="lora", rank=2, alpha=4, target_modules=["a"]))
    generator = torch.Generator().manual_seed(5)
    base = {"a.weight": torch.zeros(64, 48)}

    def adapter(scale_b: float, size: float) -> dict[str, torch.Tensor]:
        a = torch.randn(2, 48, generator=generator)
        b = torch.randn(64, 2, generator=generator) * size
        return {"a.lora_A": a / scale_b, "a.lora_B": b * scale_b}

    generator.manual_seed(5)
    small, other, large = adapter(1.0, 1.0), adapter(1.0, 1.0), adapter(1.0, 50.0)
    generator.manual_seed(5)
    adapter(1.0, 1.0), adapter(1.0, 1.0)
    large_rescaled = adapter(8.0, 50.0)  # the same change as `large`, other factors
    plain = aggregate(base, [(1, small), (2, other), (3, large)], settings)
    rescaled = aggregate(base, [(1, small), (2, other), (3, large_rescaled)], settings)
    assert plain.notes is not None and rescaled.notes is not None
    assert plain.notes[2].scale < 0.2
    for ours, theirs in zip(plain.notes, rescaled.notes, strict=True):
        assert math.isclose(ours.scale, theirs.scale, rel_tol=1e-5)


def test_a_plain_mean_checkpoint_keeps_its_bytes_and_a_robust_one_carries_its_notes(tmp_path: Path) -> None:
    """Tasks created before the robust rule recompute the same checkpoint CIDs: a plain-mean manifest has no
    `outer_step` key. A robust one names every update's norm and scale. Broken version: always dump
    `outer_step` in Manifest.canonical_bytes and the first assertion fails (`"outer_step":null`)."""
    store = LocalStore(tmp_path / "store")
    updates = list(enumerate(HONEST[:3]))
    plain = aggregate(checkpoint(), updates, training(rule="mean"))
    assert plain.notes is None
    plain_cid = save_state_dict(plain.state, store, "checkpoint", outer_step=plain.notes)
    assert b"outer_step" not in store.get(plain_cid)
    robust = aggregate(checkpoint(), updates, training())
    robust_cid = save_state_dict(robust.state, store, "checkpoint", outer_step=robust.notes)
    notes = load_manifest(robust_cid, store).outer_step
    assert notes is not None and [note.submission for note in notes] == ["0x0", "0x1", "0x2"]
    assert [note.norm for note in notes] == pytest.approx([1.0, 1.3, 0.8], rel=1e-5)


_CHILD = """
import hashlib, json, sys, torch
sys.path.insert(0, sys.argv[1])
torch.set_num_threads(int(sys.argv[2]))
from test_aggregation import HONEST, checkpoint, poison, training
from protocol.ml.aggregation import aggregate
arrived = list(enumerate([*HONEST, poison("scaled", HONEST)]))
if sys.argv[3] == "reversed":
    arrived.reverse()
digests = {}
for rule in ("clipped_mean", "trimmed_mean"):
    step = aggregate(checkpoint(), arrived, training(rule=rule))
    digest = hashlib.sha256()
    for name in sorted(step.state):
        digest.update(step.state[name].numpy().tobytes())
    digest.update(json.dumps([note.model_dump() for note in step.notes]).encode())
    digests[rule] = digest.hexdigest()
print(json.dumps(digests))
"""


def test_the_robust_rules_give_the_same_bits_in_every_process_and_thread_count() -> None:
    """Every aggregator must publish the same checkpoint CID: the clipped and trimmed means (tensors and notes)
    hash the same in fresh processes at 1 and 2 threads, with the updates arriving in either order, and here.
    Broken version: drop the sort by submission id in `aggregate` and the reversed arrival sums in another
    order (other bits, and notes in another order)."""
    here = Path(__file__).parent
    runs = []
    for threads, order in ((1, "reversed"), (2, "as_sent")):
        environment = {**os.environ, "OMP_NUM_THREADS": str(threads), "PYTHONHASHSEED": str(threads)}
        done = subprocess.run([sys.executable, "-c", _CHILD, str(here), str(threads), order], capture_output=True,
                              text=True, timeout=300, env=environment)  # fmt: skip
        assert done.returncode == 0, done.stderr
        runs.append(json.loads(done.stdout))
    assert runs[0] == runs[1]
    step = aggregate(checkpoint(), list(enumerate([*HONEST, poison("scaled", HONEST)])), training())
    digest = hashlib.sha256()
    for name in sorted(step.state):
        digest.update(step.state[name].numpy().tobytes())
    assert step.notes is not None
    digest.update(json.dumps([note.model_dump() for note in step.notes]).encode())
    assert digest.hexdigest() == runs[0]["clipped_mean"]


def test_a_trimmed_share_counts_only_the_weights_an_update_touches() -> None:
    """LoRA updates leave most weights alone: those are not "trimmed" from anyone (and are not sorted at all).
    Broken version: drop the `any(part is not None ...)` guard in `aggregate` and the untouched weights' ties are
    counted as trimmed from the first and last update: the shares move."""
    settings = TrainingSettings(
        adapter=AdapterSettings(kind="lora", rank=2, alpha=4, target_modules=["a"]),
        aggregation=AggregationSettings(rule="trimmed_mean", clip_multiple=100.0, trim=1),
    )
    generator = torch.Generator().manual_seed(9)
    base = {"a.weight": torch.zeros(64, 48), "untouched.weight": torch.zeros(512, 512)}
    updates = [
        (
            index,
            {"a.lora_A": torch.randn(2, 48, generator=generator), "a.lora_B": torch.randn(64, 2, generator=generator)},
        )
        for index in range(3)
    ]
    step = aggregate(base, updates, settings)
    alone = aggregate({"a.weight": base["a.weight"]}, updates, settings)
    assert step.notes is not None and alone.notes is not None
    assert [note.trimmed_share for note in step.notes] == [note.trimmed_share for note in alone.notes]
    assert math.isclose(sum(note.trimmed_share for note in step.notes), 2.0)
    assert torch.equal(step.state["untouched.weight"], base["untouched.weight"])
