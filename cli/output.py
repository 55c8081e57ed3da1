"""Where the CLI writes: JSON documents or Rich tables on stdout, progress and errors on stderr."""

from __future__ import annotations

import json
from dataclasses import asdict, is_dataclass
from typing import Any

from rich.console import Console
from rich.table import Table

stdout = Console(soft_wrap=True)
stderr = Console(stderr=True, soft_wrap=True)


def _plain(value: Any) -> Any:
    if is_dataclass(value) and not isinstance(value, type):
        return _plain(asdict(value))
    if isinstance(value, dict):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    if isinstance(value, bytes):
        return "0x" + value.hex()
    return value


def emit_json(document: Any) -> None:
    """Prints one JSON document on stdout and nothing else."""
    print(json.dumps(_plain(document), indent=2))


def key_value_table(title: str, rows: list[tuple[str, Any]]) -> Table:
    """Returns a two-column table."""
    table = Table(title=title, show_header=False, title_justify="left")
    table.add_column(style="bold")
    table.add_column()
    for key, value in rows:
        table.add_row(key, str(value))
    return table
