import multiprocessing
import os
from pathlib import Path

import pytest
import torch

from protocol.artifacts.cid import cid_of_bytes
from protocol.artifacts.manifest import (
    load_hf_model,
    load_manifest,
    load_state_dict,
    save_hf_model,
    save_state_dict,
    verify_manifest,
)
from protocol.artifacts.store import LocalStore
from protocol.errors import ArtifactError, ConfigError


def state_dict() -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    tensors = {f"layers.{i}.weight": torch.randn(128, 128, generator=generator) for i in range(6)}
    tensors["big"] = torch.randn(300, 300, generator=generator)  # larger than a shard
    tensors["half"] = torch.randn(64, generator=generator).to(torch.bfloat16)
    tensors["steps"] = torch.arange(10, dtype=torch.int64)
    return tensors


def test_state_dict_round_trip_is_bit_identical(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    tensors = state_dict()
    cid = save_state_dict(tensors, store, shard_bytes=200_000, model_config={"hidden": 128})
    manifest = load_manifest(cid, store)
    assert manifest.model_config_data == {"hidden": 128} and manifest.kind == "checkpoint"
    assert all(shard.size <= 200_000 or len(shard.tensors) == 1 for shard in manifest.shards)
    assert [shard.tensors[0].name for shard in manifest.shards if len(shard.tensors) == 1 and shard.size > 200_000] == [
        "big"
    ]
    loaded = load_state_dict(cid, store)
    assert set(loaded) == set(tensors)
    for name, tensor in tensors.items():
        assert loaded[name].dtype == tensor.dtype and torch.equal(loaded[name], tensor), name
    assert save_state_dict(tensors, store, shard_bytes=200_000, model_config={"hidden": 128}) == cid, "deterministic"


def test_partial_load_needs_only_its_shard(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    cid = save_state_dict(state_dict(), store, shard_bytes=200_000)
    manifest = load_manifest(cid, store)
    keep = next(shard for shard in manifest.shards if any(t.name == "layers.3.weight" for t in shard.tensors))
    for shard in manifest.shards:
        if shard.cid != keep.cid:
            store.path_for(shard.cid).unlink()
    assert set(load_state_dict(cid, store, names=["layers.3.weight"])) == {"layers.3.weight"}
    with pytest.raises(ArtifactError, match="not in the local store"):
        load_state_dict(cid, store)


def test_manifest_verified_without_shards_and_tampering_refused(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    cid = save_state_dict(state_dict(), store, shard_bytes=200_000, parent=cid_of_bytes(b"parent"))
    for shard in load_manifest(cid, store).shards:
        store.path_for(shard.cid).unlink()
    assert verify_manifest(cid, store).parent == cid_of_bytes(b"parent")
    data = store.path_for(cid).read_bytes()
    pretty = data.replace(b",", b", ")
    with pytest.raises(ArtifactError, match="not in canonical form"):
        load_manifest(store.put(pretty), store)
    with pytest.raises(ArtifactError, match="not a valid manifest"):
        load_manifest(store.put(b'{"kind": "checkpoint"}'), store)
    store.path_for(cid).write_bytes(data.replace(b"checkpoint", b"update"))
    with pytest.raises(ArtifactError, match="damaged"):
        load_manifest(cid, store)


def test_hugging_face_model_round_trip(tmp_path: Path) -> None:
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, tie_word_embeddings=True,
    )  # fmt: skip
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    store = LocalStore(tmp_path)
    rebuilt = load_hf_model(save_hf_model(model, store, shard_bytes=20_000), store)
    for (name, ours), theirs in zip(model.state_dict().items(), rebuilt.state_dict().values(), strict=True):
        assert torch.equal(ours, theirs), name
    tokens = torch.tensor([[1, 2, 3, 4]])
    assert torch.equal(model(tokens).logits, rebuilt(tokens).logits)


def test_put_verified_refuses_wrong_bytes_and_leaves_nothing(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    cid = cid_of_bytes(b"the real bytes")
    with pytest.raises(ArtifactError, match="do not match"):
        store.put_verified(cid, [b"other bytes"])
    assert not store.has(cid)
    assert [p.name for p in tmp_path.iterdir() if not p.is_dir()] == []
    with pytest.raises(ConfigError, match="malformed CID"):
        store.path_for("../../etc/passwd")


def _write_many(root: str, data: bytes, rounds: int) -> None:
    store = LocalStore(Path(root))
    for _ in range(rounds):
        store.put(data)
        store.path_for(cid_of_bytes(data)).unlink(missing_ok=True)
    store.put(data)


def test_two_processes_writing_one_cid_leave_one_correct_file(tmp_path: Path) -> None:
    data = os.urandom(3 * 1024 * 1024)
    context = multiprocessing.get_context("spawn")
    writers = [context.Process(target=_write_many, args=(str(tmp_path), data, 20)) for _ in range(2)]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join(timeout=120)
        assert writer.exitcode == 0
    store = LocalStore(tmp_path)
    assert store.get(cid_of_bytes(data)) == data
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".incoming")] == []


def test_open_store_reads_a_folder_relay_urls_or_a_kubo_api(tmp_path: Path) -> None:
    from protocol.artifacts.backends import open_store
    from protocol.artifacts.fetch import RelayStore
    from protocol.artifacts.kubo import KuboStore

    assert isinstance(open_store(str(tmp_path / "s")), LocalStore)
    relays = open_store("http://127.0.0.1:8701, http://127.0.0.1:8702")
    assert isinstance(relays, RelayStore) and relays.urls == ["http://127.0.0.1:8701", "http://127.0.0.1:8702"]
    kubo = open_store("kubo:http://127.0.0.1:5001/")
    assert isinstance(kubo, KuboStore) and kubo.api_url == "http://127.0.0.1:5001"
    for bad in ("kubo:127.0.0.1:5001", "http://127.0.0.1:8701,relay-folder"):
        with pytest.raises(ConfigError):
            open_store(bad)
