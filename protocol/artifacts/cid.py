"""CIDs as Kubo assigns them (sha2-256, 256 KiB chunks, balanced DAG), computed by aleph-cid.

CIDv1 with raw leaves (`ipfs add --cid-version 1`) is the default; CIDv0 on request. Files are
hashed in pieces, so a 10 GB file never sits in memory.
"""

from __future__ import annotations

from pathlib import Path

import aleph_cid

from protocol.errors import ConfigError
from protocol.values import checked_cid

CHUNK_BYTES = 1 << 20


def _hasher(version: int) -> aleph_cid.CidHasher:
    if version not in (0, 1):
        raise ConfigError(f"CID version must be 0 or 1, got {version}")
    return aleph_cid.CidHasher.for_ipfs_v1_raw_leaves() if version == 1 else aleph_cid.CidHasher.for_ipfs()


def cid_of_bytes(data: bytes, version: int = 1) -> str:
    """Returns the CID `ipfs add` (CIDv1 raw leaves by default, or CIDv0) gives these bytes."""
    hasher = _hasher(version)
    hasher.update(data)
    return str(hasher.finalize())


def cid_of_file(path: Path, version: int = 1) -> str:
    """Returns the CID of a file's bytes, read in 1 MiB pieces."""
    hasher = _hasher(version)
    with path.open("rb") as handle:
        while chunk := handle.read(CHUNK_BYTES):
            hasher.update(chunk)
    return str(hasher.finalize())


class CidVerifier:
    """Hashes bytes as they stream in and says at the end whether they are the expected CID's."""

    def __init__(self, expected_cid: str) -> None:
        self.expected_cid = checked_cid(expected_cid)
        try:
            self._hasher = aleph_cid.CidHasher.for_expected(expected_cid)
        except ValueError:
            raise ConfigError(f"CID {expected_cid} is of a kind that cannot be verified here (not sha2-256)") from None
        self.size = 0

    def update(self, chunk: bytes) -> None:
        """Absorbs the next piece."""
        self._hasher.update(chunk)
        self.size += len(chunk)

    def matches(self) -> bool:
        """Whether everything absorbed hashes to the expected CID (callable once)."""
        return bool(self._hasher.finalize() == self.expected_cid)


def verify_bytes(data: bytes, expected_cid: str) -> bool:
    """Whether `data` is the content of `expected_cid`."""
    verifier = CidVerifier(expected_cid)
    verifier.update(data)
    return verifier.matches()
