"""Compressed full-parameter updates (protocol.ml.compression): the encoding, error feedback, the
bytes, the refusals, and aggregation folding decoded updates."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from protocol.artifacts.cid import cid_of_bytes
from protocol.artifacts.manifest import Manifest, load_manifest, load_state_dict
from protocol.artifacts.store import LocalStore
from protocol.errors import ConfigError, LocalCopyDamaged, VerificationError
from protocol.ml.aggregation import aggregate
from protocol.ml.compression import (
    carried_residual,
    compress,
    decode,
    encode,
    load_residual,
    save_update,
    stored_bytes,
)
from protocol.ml.envs.spec import EncodingSettings, TrainingSettings, parse_spec

TOPK = EncodingSettings(kind="topk")  # 2 of every 64 values at 2 bits


def tensors(seed: int, scale: float = 1e-3) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return {
        "layer.weight": torch.randn(300, 200, generator=generator) * scale,
        "layer.bias": torch.randn(77, generator=generator) * scale,  # not a whole number of chunks
    }


def shapes(update: dict[str, torch.Tensor]) -> dict[str, torch.Size]:
    return {name: value.shape for name, value in update.items()}


@pytest.mark.parametrize("bits", [1, 2, 4, 8])
def test_each_chunk_keeps_its_largest_values_with_their_signs(bits: int) -> None:
    settings = EncodingSettings(kind="topk", keep=4, chunk=32, bits=bits)
    update = tensors(0)
    decoded = decode(encode(update, settings), shapes(update), settings)
    for name, value in update.items():
        flat = torch.nn.functional.pad(value.reshape(-1), (0, (-value.numel()) % 32)).view(-1, 32)
        got = torch.nn.functional.pad(decoded[name].reshape(-1), (0, (-value.numel()) % 32)).view(-1, 32)
        assert int((got != 0).sum(dim=1).max()) <= 4
        largest = flat.abs().topk(4, dim=1).indices
        assert torch.equal(torch.sign(got.gather(1, largest)), torch.sign(flat.gather(1, largest)))
        assert float(got.abs().amax()) <= float(value.abs().amax()) * 1.001  # the scale is the largest kept


def test_the_encoding_is_under_three_percent_of_float32_and_deterministic() -> None:
    update = tensors(1)
    stored = encode(update, TOPK)
    assert stored_bytes(stored) / stored_bytes(update) < 0.03
    again = encode({name: value.clone() for name, value in update.items()}, TOPK)
    assert all(torch.equal(stored[key], again[key]) for key in stored)


def test_error_feedback_loses_nothing_over_rounds() -> None:
    """Whatever an encoding leaves out is carried: the sum of the decoded updates plus the last residual
    is the sum of the pseudo-gradients. Without the residual (compress(delta, None, ...) each round) the
    same sum misses most of the mass, which the last assertion shows."""
    rounds = [tensors(seed) for seed in range(8)]
    residual = None
    sent = {name: torch.zeros_like(value) for name, value in rounds[0].items()}
    forgetful = {name: torch.zeros_like(value) for name, value in rounds[0].items()}
    for delta in rounds:
        stored, residual = compress(delta, residual, TOPK)
        for name, value in decode(stored, shapes(delta), TOPK).items():
            sent[name] += value
        for name, value in decode(compress(delta, None, TOPK)[0], shapes(delta), TOPK).items():
            forgetful[name] += value
    for name in sent:
        total = sum(delta[name] for delta in rounds)
        assert torch.allclose(sent[name] + residual[name], total, atol=1e-9)
        assert float((forgetful[name] - total).norm() / total.norm()) > 0.5


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda s: s.pop("layer.bias::scale"), "layer.bias::scale is missing"),
        (lambda s: s.__setitem__("layer.bias::idx", s["layer.bias::idx"].flip(0)), "out of order"),
        (lambda s: s.__setitem__("layer.weight::code", s["layer.weight::code"][:-1]), "layer.weight::code"),
        (lambda s: s.__setitem__("other::idx", s["layer.bias::idx"]), "which is no tensor"),
        (lambda s: s.__setitem__("layer.bias::scale", s["layer.bias::scale"].float()), "float16"),
    ],
)
def test_malformed_encodings_are_named(damage: object, message: str) -> None:
    update = tensors(2)
    stored = encode(update, TOPK)
    damage(stored)  # type: ignore[operator]
    with pytest.raises(VerificationError, match=message):
        decode(stored, shapes(update), TOPK)


def test_save_update_commits_the_residual_and_aggregation_folds_decoded_updates(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "store")
    checkpoint = {name: torch.zeros_like(value) for name, value in tensors(0).items()}
    first = save_update(tensors(3), store, cid_of_bytes(b"checkpoint"), TOPK)
    manifest = load_manifest(first, store)
    assert manifest.kind == "update" and manifest.encoding is not None and manifest.encoding.residual_base is None
    residual_cid = manifest.encoding.residual
    assert load_manifest(residual_cid, store).kind == "residual"
    stored = load_state_dict(first, store)
    decoded = decode(stored, shapes(checkpoint), TOPK)
    training = TrainingSettings(encoding=TOPK, outer_learning_rate=1.0)
    state = aggregate(checkpoint, [(0, stored)], training).state
    assert all(torch.equal(state[name], decoded[name]) for name in checkpoint)
    residual = load_state_dict(residual_cid, store)
    second = save_update(tensors(4), store, manifest.parent or "", TOPK, (residual_cid, residual))
    assert load_manifest(second, store).encoding.residual_base == residual_cid  # type: ignore[union-attr]


def test_a_damaged_residual_copy_is_the_trainers_own_fault_and_stops_it(tmp_path: Path) -> None:
    """A trainer whose local residual went bad cannot build its next update (its validators check the
    residual it starts from against the one its last submission named), so the read stops it with one line
    naming its own copy; nothing is published. Broken version: have `load_residual` read the shard without the
    store's CID check and this fails with the bytes accepted."""
    store = LocalStore(tmp_path / "store")
    first = save_update(tensors(3), store, cid_of_bytes(b"checkpoint"), TOPK)
    residual_cid = carried_residual(first, store)
    assert residual_cid is not None
    shard = load_manifest(residual_cid, store).shards[0].cid
    path = store.path_for(shard)
    damaged = bytearray(path.read_bytes())
    damaged[-1] ^= 0xFF
    path.write_bytes(bytes(damaged))
    with pytest.raises(LocalCopyDamaged, match=shard):
        load_residual(residual_cid, store)
    assert carried_residual(None, store) is None


def test_a_dense_manifest_keeps_its_bytes() -> None:
    """`encoding` is left out of a dense manifest's JSON: manifests written before it keep their CIDs."""
    manifest = Manifest.model_validate({"kind": "update", "shards": []})
    assert b"encoding" not in manifest.canonical_bytes()


@pytest.mark.parametrize(
    ("training", "message"),
    [
        ({"encoding": {"kind": "zstd"}}, "encoding.kind"),
        ({"encoding": {"kind": "topk", "keep": 80, "chunk": 64}}, "more than encoding.chunk"),
        ({"encoding": {"kind": "topk", "bits": 3}}, "encoding.bits"),
        ({"encoding": {"kind": "topk"}, "adapter": {"kind": "lora"}}, "a lora adapter is sent dense"),
    ],
)
def test_an_encoding_the_spec_does_not_know_is_one_line(training: dict[str, object], message: str) -> None:
    import json

    document = {"environment": "arithmetic", "training": training}
    with pytest.raises(ConfigError, match=message) as caught:
        parse_spec(json.dumps(document).encode(), "spec.json")
    assert "\n" not in str(caught.value)
