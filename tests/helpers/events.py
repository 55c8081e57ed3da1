"""The JSON events a role prints with `--json`, as the tests look for them."""

from __future__ import annotations

from typing import Any


def matches(event: dict[str, Any], name: str, fields: dict[str, Any]) -> bool:
    """Whether `event` is called `name` and carries these fields with these values."""
    return event["event"] == name and all(event.get(k) == v for k, v in fields.items())
