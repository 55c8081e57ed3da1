"""Stores of content-addressed bytes behind one interface: `put`, `get` (verified), `has`, `pin`.

`LocalStore` is a folder keyed by CID. A file appears under its CID only after its bytes were
hashed and found to match: writes go to a unique temporary file in the same folder, are synced,
then renamed into place, so no reader ever sees a partial file and two processes writing the same
CID at once leave one correct file (both rename identical bytes).
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import BinaryIO, Protocol

from protocol.artifacts.cid import CHUNK_BYTES, CidVerifier, _hasher
from protocol.config import crucible_home
from protocol.errors import ArtifactError, ConfigError, LocalCopyDamaged, OwnFault
from protocol.values import checked_cid

# What a disk says when it cannot take a write: full, over quota, read-only, failing.
DISK_ERRORS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO)
_CID_TEXT = re.compile(r"^[A-Za-z0-9]+$")


def safe_cid(cid: str) -> str:
    """Returns the CID when it parses and is plain text safe as a file name, else raises ConfigError."""
    if not isinstance(cid, str) or not _CID_TEXT.match(cid):
        raise ConfigError(f"malformed CID: {cid!r}")
    return checked_cid(cid)


class Store(Protocol):
    """What every backend offers."""

    def put(self, data: bytes) -> str:
        """Stores bytes; returns their CID."""
        ...

    def get(self, cid: str) -> bytes:
        """Returns the bytes of `cid`, checked against it."""
        ...

    def has(self, cid: str) -> bool:
        """Whether the store holds `cid`."""
        ...

    def pin(self, cid: str) -> None:
        """Keeps `cid` from garbage collection."""
        ...


class LocalStore:
    """A folder of files named by their CIDs."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / ".partial").mkdir(exist_ok=True)
        (self.root / ".pins").mkdir(exist_ok=True)
        (self.root / ".damaged").mkdir(exist_ok=True)

    def path_for(self, cid: str) -> Path:
        """Where `cid` lives (whether or not it is there)."""
        return self.root / safe_cid(cid)

    def partial_path(self, cid: str) -> Path:
        """Where an interrupted download of `cid` is kept to be resumed."""
        return self.root / ".partial" / safe_cid(cid)

    def damaged_path(self, cid: str) -> Path:
        """Where a copy of `cid` found damaged was set aside (kept for a look, never served)."""
        return self.root / ".damaged" / safe_cid(cid)

    def has(self, cid: str) -> bool:
        """Whether the store holds `cid`."""
        return self.path_for(cid).is_file()

    def put(self, data: bytes) -> str:
        """Stores bytes; returns their CIDv1."""
        hasher = _hasher(1)
        hasher.update(data)
        cid = str(hasher.finalize())
        if not self.has(cid):
            self._install(cid, [data])
        self.damaged_path(cid).unlink(missing_ok=True)
        return cid

    def put_file(self, path: Path) -> str:
        """Stores a file's bytes (streamed); returns their CIDv1."""
        hasher = _hasher(1)
        with self._temporary() as (handle, temporary):
            with Path(path).open("rb") as source:
                while chunk := source.read(CHUNK_BYTES):
                    hasher.update(chunk)
                    handle.write(chunk)
            cid = str(hasher.finalize())
            self._commit(handle, temporary, cid)
        self.damaged_path(cid).unlink(missing_ok=True)
        return cid

    def put_verified(self, expected_cid: str, chunks: Iterable[bytes]) -> int:
        """Stores streamed bytes under `expected_cid` only if they hash to it; returns the size."""
        verifier = CidVerifier(safe_cid(expected_cid))
        with self._temporary() as (handle, temporary):
            for chunk in chunks:
                verifier.update(chunk)
                handle.write(chunk)
            if not verifier.matches():
                raise ArtifactError(f"bytes received for {expected_cid} do not match it: nothing stored")
            self._commit(handle, temporary, expected_cid)
        self.damaged_path(expected_cid).unlink(missing_ok=True)
        return verifier.size

    def install_verified_file(self, expected_cid: str, path: Path) -> None:
        """Moves a file that was verified against `expected_cid` into the store."""
        os.replace(path, self.path_for(expected_cid))
        self.damaged_path(expected_cid).unlink(missing_ok=True)

    def get(self, cid: str) -> bytes:
        """Returns the bytes of `cid`, re-checked against it. A damaged copy is this store's own fault,
        not its publisher's: it is set aside under `.damaged/` (so that `has` says no and a fetcher gets
        it again by CID) and LocalCopyDamaged is raised, again on every read until a sound copy arrives."""
        path = self.path_for(cid)
        if not path.is_file():
            if self.damaged_path(cid).exists():
                raise LocalCopyDamaged(
                    f"the local copy of {cid} was damaged and set aside, and no sound copy has come since"
                )
            raise ArtifactError(f"{cid} is not in the local store {self.root}")
        try:
            data = path.read_bytes()
        except OSError as error:
            raise OwnFault(f"cannot read the local copy of {cid} at {path}: {error.strerror}") from None
        verifier = CidVerifier(cid)
        verifier.update(data)
        if not verifier.matches():
            os.replace(path, self.damaged_path(cid))
            raise LocalCopyDamaged(f"the local copy of {cid} at {path} is damaged: set aside, to be fetched again")
        return data

    def open_chunks(self, cid: str, start: int = 0, end: int | None = None) -> Iterator[bytes]:
        """Yields the stored bytes of `cid` from `start` to `end` (exclusive), in pieces."""
        with self.path_for(cid).open("rb") as handle:
            handle.seek(start)
            remaining = (end if end is not None else os.fstat(handle.fileno()).st_size) - start
            while remaining > 0:
                chunk = handle.read(min(CHUNK_BYTES, remaining))
                if not chunk:
                    return
                remaining -= len(chunk)
                yield chunk

    def size_of(self, cid: str) -> int:
        """Size in bytes of a stored CID."""
        return self.path_for(cid).stat().st_size

    def pin(self, cid: str) -> None:
        """Marks `cid` as pinned (a local store keeps everything; the mark is for tools)."""
        if not self.has(cid):
            raise ArtifactError(f"cannot pin {cid}: it is not in the local store {self.root}")
        (self.root / ".pins" / safe_cid(cid)).touch()

    def cids(self) -> list[str]:
        """Every CID held."""
        return sorted(path.name for path in self.root.iterdir() if path.is_file() and not path.name.startswith("."))

    # ------------------------------------------------------------ atomic writes

    def _install(self, cid: str, chunks: Iterable[bytes]) -> None:
        with self._temporary() as (handle, temporary):
            for chunk in chunks:
                handle.write(chunk)
            self._commit(handle, temporary, cid)

    def _temporary(self) -> _Temporary:
        return _Temporary(self.root)

    def _commit(self, handle: BinaryIO, temporary: Path, cid: str) -> None:
        handle.flush()
        os.fsync(handle.fileno())
        os.replace(temporary, self.path_for(cid))


class _Temporary:
    """A unique temporary file in the store's folder, removed unless it was renamed into place. A
    write the disk refuses (full, read-only, failing) is the store's own fault: OwnFault."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def __enter__(self) -> tuple[BinaryIO, Path]:
        try:
            descriptor, name = tempfile.mkstemp(dir=self.root, prefix=".incoming-")
        except OSError as error:
            raise OwnFault(f"cannot write to the local store {self.root}: {error.strerror}") from None
        self.path = Path(name)
        self.handle = os.fdopen(descriptor, "wb")
        return self.handle, self.path

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, trace: object) -> None:
        with contextlib.suppress(OSError):  # the write failed already; its error is the one to report
            self.handle.close()
        self.path.unlink(missing_ok=True)
        if isinstance(error, OSError) and error.errno in DISK_ERRORS:
            raise OwnFault(f"cannot write to the local store {self.root}: {error.strerror}") from None


def keep_local_copy(data: bytes, cid: str) -> Path:
    """Stores bytes in the default local store (the state folder's `store/`) and returns the path."""
    store = LocalStore(crucible_home() / "store")
    stored = store.put(data)
    if stored != cid:
        raise ConfigError(f"internal: bytes hash to {stored}, not {cid}")
    return store.path_for(cid)
