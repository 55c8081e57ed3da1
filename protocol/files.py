"""Small state files written so that a crash never leaves half of one."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


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
