"""CIDs as Kubo assigns them (sha2-256, 256 KiB chunks, balanced DAG), computed by aleph-cid."""

from __future__ import annotations

import os
from pathlib import Path

import aleph_cid

from protocol.config import crucible_home

CHUNK_BYTES = 1 << 20


def _hasher(version: int) -> aleph_cid.CidHasher:
    return aleph_cid.CidHasher.for_ipfs_v1_raw_leaves() if version == 1 else aleph_cid.CidHasher.for_ipfs()


def cid_of_bytes(data: bytes, version: int = 1) -> str:
    """Returns the CID `ipfs add` (CIDv1 raw leaves by default, or CIDv0) gives these bytes."""
    hasher = _hasher(version)
    hasher.update(data)
    return str(hasher.finalize())


def cid_of_file(path: Path, version: int = 1) -> str:
    """Returns the CID of a file's bytes, read in 1 MiB pieces so it never sits in memory whole."""
    hasher = _hasher(version)
    with path.open("rb") as handle:
        while chunk := handle.read(CHUNK_BYTES):
            hasher.update(chunk)
    return str(hasher.finalize())


def keep_local_copy(data: bytes, cid: str) -> Path:
    """Stores bytes under the state folder keyed by their CID (atomically) and returns the path."""
    directory = crucible_home() / "store"
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / cid
    if not path.exists():
        temporary = directory / f".{cid}.{os.getpid()}.tmp"
        temporary.write_bytes(data)
        os.replace(temporary, path)
    return path
