"""`crucible env list|spec`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer
from rich.table import Table

from cli.output import emit_json, stdout
from protocol.errors import ConfigError

app = typer.Typer(no_args_is_help=True, help="Verifiable environments and their specs.")

JSON = typer.Option(False, "--json", help="Print one JSON document on stdout.")


@app.command("list")
def list_(json_output: bool = JSON) -> None:
    """List the environments: the built-in ones and every reasoning-gym dataset."""
    from protocol.ml.envs.registry import environment_kind, environment_names

    rows = [{"name": name, "description": environment_kind(name).description} for name in environment_names()]
    if json_output:
        emit_json(rows)
        return
    table = Table("name", "description", title="Environments", title_justify="left")
    for row in rows:
        table.add_row(row["name"], row["description"])
    stdout.print(table)


def _value(text: str) -> Any:
    """A --set value: JSON when it parses (numbers, booleans, lists), the text itself otherwise."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def apply_settings(document: dict[str, Any], settings: list[str], params_fields: set[str]) -> dict[str, Any]:
    """`key=value` settings applied to a spec document: a dotted key is a path in the spec
    (`training.group_size=4`), a key the environment's parameters define sets that parameter, and any
    other key is a dataset configuration key (`params.config`)."""
    for setting in settings:
        key, equals, text = setting.partition("=")
        if not equals or not key:
            raise ConfigError(f"--set {setting!r}: expected key=value")
        value = _value(text)
        if "." in key:
            path = key.split(".")
        elif key in params_fields:
            path = ["params", key]
        else:
            path = ["params", "config", key]
        node = document
        for part in path[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ConfigError(f"--set {key}: {part} is not a section of the spec")
            node = child
        node[path[-1]] = value
    return document


@app.command()
def spec(
    name: str = typer.Argument(..., help="Environment name (`crucible env list`)."),
    settings: list[str] = typer.Option(
        [], "--set", help="key=value: a dataset configuration key, an environment parameter or a spec path."
    ),
    out: Path = typer.Option(None, "--out", help="Write the spec to this file instead of printing it."),
    json_output: bool = typer.Option(False, "--json", help="The spec is JSON either way; accepted for scripts."),
) -> None:
    """Print (or write) an environment's spec: its defaults, changed by --set. `crucible task create
    --env` takes the file."""
    from protocol.files import write_text_atomic
    from protocol.ml.envs.registry import environment_kind
    from protocol.ml.envs.spec import parse_spec

    params_fields = set(environment_kind(name).params_model.model_fields)
    document = apply_settings({"environment": name}, settings, params_fields)
    checked = parse_spec(json.dumps(document).encode(), "from --set")
    text = json.dumps(checked.model_dump(by_alias=True, mode="json"), indent=2, sort_keys=True)
    if out is None:
        print(text)
        return
    write_text_atomic(out, text + "\n")
    if json_output:
        emit_json({"out": str(out), "environment": checked.environment})
    else:
        stdout.print(f"spec of {checked.environment} written to {out}")
