"""Checkpoints and updates as manifests: canonical JSON listing safetensors shards by CID.

A manifest names its shards (each a safetensors file of at most `shard_bytes`, default 64 MiB),
the tensors in each (name, dtype, shape), the model config and the parent checkpoint's CID. Its
own CID is that of its canonical JSON (sorted keys, no spaces, UTF-8). Tensors are packed whole,
in name order; a tensor larger than `shard_bytes` gets a shard of its own (documented in
docs/formats.md), so a shard never has to be joined with another to read one tensor.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, Field, ValidationError, field_validator

from protocol.artifacts.store import Store, safe_cid
from protocol.errors import ArtifactError

if TYPE_CHECKING:  # torch and safetensors load on first use: relays and the CLI start without them.
    import torch

SCHEMA: Literal["crucible.manifest"] = "crucible.manifest"
SCHEMA_VERSION = 1
DEFAULT_SHARD_BYTES = 64 * 1024 * 1024
MAX_MANIFEST_BYTES = 16 * 1024 * 1024


def canonical_json(document: Any) -> bytes:
    """JSON with sorted keys, no spaces, UTF-8: the bytes whose CID names a manifest or a rollout file."""
    return json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


class TensorEntry(BaseModel):
    """One tensor of a shard."""

    name: str = Field(min_length=1, description="The state-dict key.")
    dtype: str = Field(description="torch dtype name, e.g. float32, bfloat16.")
    shape: list[int] = Field(description="The tensor's shape.")


class ShardEntry(BaseModel):
    """One safetensors file."""

    cid: str = Field(description="CID of the shard's bytes.")
    size: int = Field(ge=0, description="Size of the shard in bytes.")
    tensors: list[TensorEntry] = Field(description="Tensors in the shard, in name order.")

    @field_validator("cid")
    @classmethod
    def _cid(cls, value: str) -> str:
        return safe_cid(value)


class UpdateEncoding(BaseModel):
    """How an update manifest's tensors encode the update (absent: dense float32), and the trainer's
    error-feedback residuals it commits to: the one it started from and the one it carries on."""

    kind: Literal["topk"] = "topk"
    chunk: int = Field(ge=2, le=256)
    keep: int = Field(ge=1, le=256)
    bits: Literal[1, 2, 4, 8]
    residual: str = Field(description="CID of the residual manifest carried to the trainer's next submission.")
    residual_base: str | None = Field(
        description="CID of the residual of the trainer's previous submission in the task (null: its first)."
    )

    model_config = {"extra": "forbid"}

    @field_validator("residual", "residual_base")
    @classmethod
    def _cids(cls, value: str | None) -> str | None:
        return safe_cid(value) if value is not None else None


class OuterStepNote(BaseModel):
    """How the outer step treated one included update of the round a checkpoint aggregates: its norm (L2 over
    every tensor of its dense delta), the factor it was scaled by (1: not clipped) and the share of its values
    a trimmed mean dropped. A note, not a finding: a large honest update is clipped too."""

    submission: str = Field(description="The submission id, 0x-hex.")
    norm: float = Field(ge=0)
    scale: float = Field(ge=0, le=1)
    trimmed_share: float = Field(0.0, ge=0, le=1)

    model_config = {"extra": "forbid"}


class Manifest(BaseModel):
    """A checkpoint, an update (a pseudo-gradient) or a trainer's error-feedback residual, schema-versioned."""

    schema_name: Literal["crucible.manifest"] = Field("crucible.manifest", alias="schema")
    schema_version: Literal[1] = 1
    kind: Literal["checkpoint", "update", "residual"] = Field(
        description="A full checkpoint, an update against `parent`, or a residual (error feedback)."
    )
    parent: str | None = Field(None, description="CID of the parent checkpoint's manifest.")
    model_config_data: dict[str, Any] | None = Field(None, alias="model_config", description="The model's config.")
    shards: list[ShardEntry]
    encoding: UpdateEncoding | None = Field(None, description="An update's encoding; absent when dense.")
    outer_step: list[OuterStepNote] | None = Field(
        None, description="A checkpoint's: how its outer step treated each update; absent for the plain mean."
    )

    model_config = {"populate_by_name": True, "extra": "forbid"}

    @field_validator("parent")
    @classmethod
    def _parent(cls, value: str | None) -> str | None:
        return safe_cid(value) if value is not None else None

    @field_validator("shards")
    @classmethod
    def _unique_names(cls, shards: list[ShardEntry]) -> list[ShardEntry]:
        names = [tensor.name for shard in shards for tensor in shard.tensors]
        if len(names) != len(set(names)):
            raise ValueError("a tensor name appears twice")
        return shards

    def canonical_bytes(self) -> bytes:
        """The bytes whose CID is the manifest's CID."""
        # `encoding` and `outer_step` appear only when set, so dense manifests and plain-mean checkpoints keep
        # the bytes (and CIDs) they always had.
        unset = {name for name in ("encoding", "outer_step") if getattr(self, name) is None}
        return canonical_json(self.model_dump(by_alias=True, mode="json", exclude=unset or None))

    def tensor_names(self) -> list[str]:
        """Every tensor name, in shard order."""
        return [tensor.name for shard in self.shards for tensor in shard.tensors]


def _dtype_name(tensor: torch.Tensor) -> str:
    return str(tensor.dtype).removeprefix("torch.")


def _pack(names: list[str], tensors: dict[str, torch.Tensor], shard_bytes: int) -> Iterable[list[str]]:
    group: list[str] = []
    size = 0
    for name in names:
        nbytes = tensors[name].numel() * tensors[name].element_size()
        if group and size + nbytes > shard_bytes:
            yield group
            group, size = [], 0
        group.append(name)
        size += nbytes
    if group:
        yield group


def save_state_dict(
    tensors: dict[str, torch.Tensor],
    store: Store,
    kind: Literal["checkpoint", "update", "residual"] = "checkpoint",
    shard_bytes: int = DEFAULT_SHARD_BYTES,
    model_config: dict[str, Any] | None = None,
    parent: str | None = None,
    encoding: UpdateEncoding | None = None,
    outer_step: list[OuterStepNote] | None = None,
) -> str:
    """Stores a state dict as safetensors shards plus a manifest; returns the manifest's CID."""
    from safetensors.torch import save as save_safetensors

    shards = []
    for group in _pack(sorted(tensors), tensors, shard_bytes):
        # Each tensor is copied on its own (contiguous, on the CPU): tied weights share storage,
        # which safetensors refuses, and only one shard's copies exist at a time.
        part = {name: tensors[name].detach().to("cpu").contiguous().clone() for name in group}
        data = save_safetensors(part)
        entries = [TensorEntry(name=n, dtype=_dtype_name(part[n]), shape=list(part[n].shape)) for n in group]
        shards.append(ShardEntry(cid=store.put(data), size=len(data), tensors=entries))
    manifest = Manifest(
        schema_name=SCHEMA, kind=kind, parent=parent, model_config_data=model_config, shards=shards,
        encoding=encoding, outer_step=outer_step,
    )  # fmt: skip
    return store.put(manifest.canonical_bytes())


def load_manifest(cid: str, store: Store) -> Manifest:
    """Fetches (verified) and parses a manifest, naming what is wrong with a bad one."""
    data = store.get(cid)
    if len(data) > MAX_MANIFEST_BYTES:
        raise ArtifactError(f"{cid} is {len(data)} bytes: too large for a manifest")
    return parse_manifest(data, cid)


def parse_manifest(data: bytes, cid: str) -> Manifest:
    """Parses manifest bytes already checked against `cid`; they must also be in canonical form."""
    try:
        manifest = Manifest.model_validate(json.loads(data))
    except (ValueError, ValidationError) as error:
        reason = str(error).splitlines()[0]
        raise ArtifactError(f"{cid} is not a valid manifest: {reason}") from None
    if manifest.canonical_bytes() != data:
        raise ArtifactError(f"{cid} is not in canonical form: its CID would not be reproducible")
    return manifest


def verify_manifest(cid: str, store: Store) -> Manifest:
    """Checks a manifest (its CID, schema, shard CIDs, unique names) without fetching any shard."""
    return load_manifest(cid, store)


def load_state_dict(
    cid: str, store: Store, names: Iterable[str] | None = None, device: str = "cpu"
) -> dict[str, torch.Tensor]:
    """Loads a manifest's tensors (only the shards holding `names`, when given), bit-identical."""
    from safetensors.torch import load as load_safetensors

    manifest = load_manifest(cid, store)
    wanted = set(names) if names is not None else set(manifest.tensor_names())
    missing = wanted - set(manifest.tensor_names())
    if missing:
        raise ArtifactError(f"manifest {cid} has no tensor {sorted(missing)[0]!r}")
    result: dict[str, torch.Tensor] = {}
    for shard in manifest.shards:
        if not wanted & {tensor.name for tensor in shard.tensors}:
            continue
        loaded = load_safetensors(store.get(shard.cid))
        for entry in shard.tensors:
            tensor = loaded.get(entry.name)
            if tensor is None or _dtype_name(tensor) != entry.dtype or list(tensor.shape) != entry.shape:
                raise ArtifactError(f"shard {shard.cid} does not hold {entry.name} as its manifest says")
            if entry.name in wanted:
                result[entry.name] = tensor.to(device)
    return result


def own_tensors(model: Any) -> dict[str, torch.Tensor]:
    """A model's state dict without the names of tied weights: a tensor shared by several names (the
    output head tied to the embeddings) is kept once, under its first name."""
    seen: set[tuple[int, int]] = set()
    kept: dict[str, torch.Tensor] = {}
    for name, tensor in model.state_dict().items():
        key = (tensor.untyped_storage().data_ptr(), tensor.storage_offset())
        if key not in seen:
            seen.add(key)
            kept[name] = tensor
    return kept


def save_hf_model(model: Any, store: Store, parent: str | None = None, shard_bytes: int = DEFAULT_SHARD_BYTES) -> str:
    """Stores a Hugging Face model (its own tensors and config) as a checkpoint manifest."""
    config = model.config.to_dict()
    return save_state_dict(own_tensors(model), store, "checkpoint", shard_bytes, config, parent)


def load_hf_model(cid: str, store: Store, device: str = "cpu") -> Any:
    """Rebuilds a Hugging Face causal LM from a checkpoint manifest (no hub access)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    manifest = load_manifest(cid, store)
    if manifest.model_config_data is None:
        raise ArtifactError(f"manifest {cid} carries no model config")
    config_data = dict(manifest.model_config_data)
    config = AutoConfig.for_model(config_data.pop("model_type"), **config_data)
    model = AutoModelForCausalLM.from_config(config)
    state = load_state_dict(cid, store, device=device)
    model.load_state_dict(state, strict=False)
    missing = set(own_tensors(model)) - set(state)
    if missing:
        raise ArtifactError(f"manifest {cid} lacks tensors the model needs: {sorted(missing)[:3]}")
    return model.to(device)
