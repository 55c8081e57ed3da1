"""Small state files written so that a crash never leaves half of one, and JSON documents read with a
bound on their size."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from protocol.errors import CrucibleError


def write_json_atomic(path: Path, document: Any) -> None:
    """Writes `document` as JSON to `path`: a temporary file beside it, fsync, then a rename."""
    write_text_atomic(path, json.dumps(document, indent=1, sort_keys=True))


def write_text_atomic(path: Path, text: str) -> None:
    """Writes `text` to `path`: a temporary file beside it, fsync, then a rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(f".{os.getpid()}.tmp")
    with temporary.open("w") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)


def bounded_json(data: bytes, limit: int, what: str, error: type[CrucibleError]) -> Any:
    """Parses a JSON document of at most `limit` bytes; `error` naming `what` and the first problem."""
    if len(data) > limit:
        raise error(f"{what} is {len(data)} bytes, above the {limit} bound")
    try:
        return json.loads(data)
    except ValueError as reason:
        raise error(f"{what} is not JSON: {reason}") from None
