"""Compressed full-parameter updates: chunked top-k at a few bits, with error feedback.

An update encoded `topk` keeps, in every chunk of `chunk` consecutive values of a tensor (flattened,
the last chunk padded with zeros), the `keep` values of largest magnitude: their positions in the
chunk (uint8), and each as a sign and a magnitude of `bits - 1` bits on a scale per chunk (the
chunk's largest kept magnitude, float16): value = ±(m / 2^(bits-1)) · scale, m in 1..2^(bits-1).
For a tensor `N` the manifest holds `N::idx` (uint8, `keep` per chunk, ascending within a chunk),
`N::code` (the codes, `bits` each, packed low bits first into uint8) and `N::scale` (float16, one
per chunk). The tensor's shape is the checkpoint's.

Error feedback (as in DiLoCo-style sparse schemes: DisTrO, SparseLoCo): a trainer encodes
A = Δ + R, its pseudo-gradient plus the residual it carried from its previous submission, and
carries R' = A - decode(encode(A)) (float32) to the next. Everything here is a
deterministic function of its inputs (a stable sort picks the kept values; ties go to the lower
position), so a validator that replays Δ re-derives the same encoding up to the replay's own
float noise.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from protocol.artifacts.manifest import UpdateEncoding, load_manifest, load_state_dict, save_state_dict
from protocol.artifacts.store import Store
from protocol.errors import ArtifactError, VerificationError
from protocol.ml.envs.spec import EncodingSettings

if TYPE_CHECKING:
    import torch

SUFFIXES = ("::idx", "::code", "::scale")


def _pack(codes: torch.Tensor, bits: int) -> torch.Tensor:
    import torch

    per = 8 // bits
    padded = torch.nn.functional.pad(codes, (0, (-codes.numel()) % per)).view(-1, per).to(torch.int32)
    shifts = torch.arange(per, dtype=torch.int32) * bits
    return (padded << shifts).sum(dim=1).to(torch.uint8)


def _unpack(packed: torch.Tensor, bits: int, count: int) -> torch.Tensor:
    import torch

    per = 8 // bits
    shifts = torch.arange(per, dtype=torch.int32) * bits
    codes = (packed.to(torch.int32)[:, None] >> shifts) & ((1 << bits) - 1)
    return codes.reshape(-1)[:count]


def encode_tensor(values: torch.Tensor, settings: EncodingSettings) -> dict[str, torch.Tensor]:
    """One tensor's `idx`, `code` and `scale` (keys without the name)."""
    import torch

    chunk, keep, bits = settings.chunk, settings.keep, settings.bits
    flat = values.detach().to("cpu", torch.float32).reshape(-1)
    rows = torch.nn.functional.pad(flat, (0, (-flat.numel()) % chunk)).view(-1, chunk)
    order = torch.sort(rows.abs(), dim=1, descending=True, stable=True).indices[:, :keep]
    index = torch.sort(order, dim=1).values
    kept = rows.gather(1, index)
    scale = kept.abs().amax(dim=1).to(torch.float16)
    levels = 1 << (bits - 1)
    unit = scale.float().clamp(min=torch.finfo(torch.float16).tiny)[:, None]
    magnitude = torch.round(kept.abs() / unit * levels).clamp(1, levels).to(torch.int32)
    codes = ((kept < 0).to(torch.int32) << (bits - 1)) | (magnitude - 1)
    return {"::idx": index.to(torch.uint8).reshape(-1), "::code": _pack(codes.reshape(-1), bits), "::scale": scale}


def encode(update: dict[str, torch.Tensor], settings: EncodingSettings) -> dict[str, torch.Tensor]:
    """The stored tensors of an update's `topk` encoding."""
    return {
        name + suffix: part for name, value in update.items() for suffix, part in encode_tensor(value, settings).items()
    }


def decode(
    stored: dict[str, torch.Tensor], shapes: dict[str, torch.Size], settings: EncodingSettings
) -> dict[str, torch.Tensor]:
    """The dense float32 update an encoding stands for, each tensor of the shape `shapes` gives it.
    Raises VerificationError on anything malformed: a name the shapes do not know, a part missing or
    of the wrong size or dtype, a position outside its chunk or repeated in it."""
    import torch

    names = {key.rsplit("::", 1)[0] for key in stored}
    unknown = sorted(key for key in stored if not key.endswith(SUFFIXES) or key.rsplit("::", 1)[0] not in shapes)
    if unknown:
        raise VerificationError(f"an encoded update names {unknown[0]}, which is no tensor of the checkpoint")
    missing = sorted(set(shapes) - names)
    if missing:
        raise VerificationError(f"an encoded update lacks tensor {missing[0]}")
    chunk, keep, bits = settings.chunk, settings.keep, settings.bits
    levels = 1 << (bits - 1)
    result = {}
    for name, shape in shapes.items():
        numel = int(torch.Size(shape).numel())
        rows = -(-numel // chunk)
        parts = {suffix: stored.get(name + suffix) for suffix in SUFFIXES}
        expected = {
            "::idx": (torch.uint8, rows * keep),
            "::code": (torch.uint8, -(-rows * keep * bits // 8)),
            "::scale": (torch.float16, rows),
        }
        for suffix, (dtype, count) in expected.items():
            part = parts[suffix]
            if part is None or part.dtype != dtype or part.dim() != 1 or part.numel() != count:
                raise VerificationError(f"{name}{suffix} is missing or not {count} values of {dtype}")
        index = parts["::idx"].to(torch.int64).view(rows, keep)  # type: ignore[union-attr]
        if (keep > 1 and not bool((index[:, 1:] > index[:, :-1]).all())) or bool((index >= chunk).any()):
            raise VerificationError(f"{name}::idx has a position outside its chunk or out of order")
        codes = _unpack(parts["::code"], bits, rows * keep).view(rows, keep)  # type: ignore[arg-type]
        sign = 1.0 - 2.0 * ((codes >> (bits - 1)) & 1).float()
        magnitude = ((codes & (levels - 1)) + 1).float() / levels
        scale = parts["::scale"].float()[:, None]  # type: ignore[union-attr]
        if not bool(torch.isfinite(scale).all()):
            raise VerificationError(f"{name}::scale is not finite")
        dense = torch.zeros(rows, chunk, dtype=torch.float32)
        dense.scatter_(1, index, sign * magnitude * scale)
        result[name] = dense.reshape(-1)[:numel].reshape(shape)
    return result


def compress(
    delta: dict[str, torch.Tensor], residual: dict[str, torch.Tensor] | None, settings: EncodingSettings
) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """Error feedback: encodes A = Δ + residual; returns the encoding and the residual to carry,
    A - decode(encoding), in float32."""
    import torch

    accumulated = {
        name: value.detach().to("cpu", torch.float32) + (residual[name].float() if residual else 0.0)
        for name, value in delta.items()
    }
    stored = encode(accumulated, settings)
    decoded = decode(stored, {name: value.shape for name, value in accumulated.items()}, settings)
    carried = {name: value - decoded[name] for name, value in accumulated.items()}
    return stored, carried


def stored_bytes(tensors: dict[str, torch.Tensor]) -> int:
    """The bytes of a set of tensors' data."""
    return sum(value.numel() * value.element_size() for value in tensors.values())


def carried_residual(previous_update_cid: str | None, store: Store) -> str | None:
    """The residual a trainer carries into its next submission: the one its previous submission's update
    manifest names (None when it had none: no previous submission, or a dense one)."""
    if previous_update_cid is None:
        return None
    record = load_manifest(previous_update_cid, store).encoding
    return record.residual if record is not None else None


def load_residual(cid: str, store: Store) -> dict[str, torch.Tensor]:
    """A residual manifest's tensors (fetched and checked against its CID)."""
    if load_manifest(cid, store).kind != "residual":
        raise ArtifactError(f"{cid} is not a residual manifest")
    return load_state_dict(cid, store)


def save_update(
    delta: dict[str, torch.Tensor],
    store: Store,
    parent: str,
    settings: EncodingSettings,
    residual_base: tuple[str, dict[str, torch.Tensor]] | None = None,
) -> str:
    """Stores an update manifest as `settings` encode it (with `topk`: its residual too, started from
    `residual_base`, a residual's CID and tensors); returns its CID."""
    if settings.kind == "dense":
        return save_state_dict(delta, store, "update", parent=parent)
    base_cid, base = residual_base if residual_base is not None else (None, None)
    stored, carried = compress(delta, base, settings)
    residual = save_state_dict(carried, store, "residual", parent=parent)
    record = UpdateEncoding(
        chunk=settings.chunk, keep=settings.keep, bits=settings.bits, residual=residual, residual_base=base_cid
    )
    return save_state_dict(stored, store, "update", parent=parent, encoding=record)
