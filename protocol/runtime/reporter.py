"""Structured output of a long-running role: one JSON object per line with `--json`, else log lines;
Rich progress bars on stderr for generation and training."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from protocol.chain.ids import submission_text
from protocol.values import format_tokens


class Reporter:
    """Events as JSON lines on stdout (`json_lines`) or as readable lines on stderr."""

    def __init__(self, role: str, json_lines: bool, console: Console | None = None) -> None:
        self.role = role
        self.json_lines = json_lines
        self.console = console or Console(stderr=True)
        self.token: tuple[int, str] | None = None  # (decimals, symbol): `*_wei` fields shown as tokens

    def use_token(self, decimals: int, symbol: str) -> None:
        """Shows `*_wei` fields of human lines as amounts of this token (JSON lines keep exact wei)."""
        self.token = (decimals, symbol)

    def event(self, name: str, **fields: Any) -> None:
        """Reports one event; fields must be JSON values (bytes are written as 0x-hex)."""
        clean = {key: _json_value(key, value) for key, value in fields.items()}
        if self.json_lines:
            sys.stdout.write(
                json.dumps({"event": name, "role": self.role, "time": round(time.time(), 3)} | clean) + "\n"
            )
            sys.stdout.flush()
        else:
            # A `note` is the line's plain words, last; beside one, `revert` (the contract's error name, kept in
            # JSON for scripts) is left out: a race lost is not a failure and should not read like one.
            note = clean.pop("note", None)
            hidden = {"revert"} if note is not None else set()
            shown = (self._human(key, value) for key, value in clean.items() if value is not None and key not in hidden)
            details = " ".join(f"{key}={value}" for key, value in shown) + (f": {note}" if note is not None else "")
            self.console.print(
                f"[dim]{time.strftime('%H:%M:%S')}[/dim] {self.role} {name} {escape(details)}",
                highlight=False,
                markup=True,
            )

    def _human(self, key: str, value: Any) -> tuple[str, str]:
        """A field as a person reads it: amounts in tokens, yes/no, a few digits, no Python reprs."""
        if key.endswith("_wei") and self.token is not None and str(value).isdigit():
            return key.removesuffix("_wei"), format_tokens(int(value), *self.token)
        return key, _plain(value)

    @contextmanager
    def progress(self, description: str, total: int) -> Iterator[Callable[[int], None]]:
        """A progress bar (none with --json or off a terminal); yields `advance(n)`."""
        if self.json_lines or not self.console.is_terminal:
            yield lambda n: None
            return
        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        with Progress(*columns, console=self.console, transient=True) as bar:
            task = bar.add_task(description, total=total)
            yield lambda n: bar.advance(task, n)


def _json_value(key: str, value: Any) -> Any:
    """A field as JSON: bytes as 0x-hex, submission ids (given as numbers) in the one notation people and
    scripts see everywhere, 0x-hex (`submission_text`)."""
    if isinstance(value, bytes):
        return "0x" + value.hex()
    if key == "submission" and isinstance(value, int):
        return submission_text(value)
    if key == "submissions" and isinstance(value, list):
        return [submission_text(item) if isinstance(item, int) else item for item in value]
    return value


def _plain(value: Any) -> str:
    """A JSON value without Python's reprs: yes/no, floats to 4 significant digits, lists and objects
    spelled out."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, dict):
        return "(" + ", ".join(f"{key} {_plain(item)}" for key, item in value.items()) + ")"
    if isinstance(value, list | tuple):  # in brackets: `rounds=[0]` is round 0, not a count of none
        return "[" + ",".join(_plain(item) for item in value) + "]" if value else "none"
    return "-" if value is None else str(value)
