"""`crucible env list|spec`."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.table import Table

from cli.output import emit_json, stdout

app = typer.Typer(no_args_is_help=True, help="Verifiable environments and their specs.")

JSON = typer.Option(False, "--json", help="Print one JSON document on stdout.")


@app.command("list")
def list_(json_output: bool = JSON) -> None:
    """List the environments (the built-in ones and every reasoning-gym dataset) and the presets of settings
    `env spec --preset` starts a spec from."""
    from protocol.ml.envs.presets import PRESETS
    from protocol.ml.envs.registry import environment_kind, environment_names

    rows = [{"name": name, "description": environment_kind(name).description} for name in environment_names()]
    presets = [{"name": name, "description": found.description} for name, found in sorted(PRESETS.items())]
    if json_output:
        emit_json({"environments": rows, "presets": presets})
        return
    table = Table("name", "description", title="Environments", title_justify="left")
    for row in rows:
        table.add_row(row["name"], row["description"])
    stdout.print(table)
    table = Table("name", "settings", title="Presets (`crucible env spec NAME --preset P`)", title_justify="left")
    for row in presets:
        table.add_row(row["name"], row["description"])
    stdout.print(table)


@app.command()
def spec(
    name: str = typer.Argument(..., help="Environment name (`crucible env list`)."),
    settings: list[str] = typer.Option(
        [], "--set", help="key=value: a dataset configuration key, an environment parameter or a spec path."
    ),
    preset_name: str = typer.Option(
        None, "--preset", help="Start from a preset's settings (`crucible env list`), e.g. small-model."
    ),
    out: Path = typer.Option(None, "--out", help="Write the spec to this file instead of printing it."),
    json_output: bool = typer.Option(False, "--json", help="The spec is JSON either way; accepted for scripts."),
) -> None:
    """Print (or write) an environment's spec: its defaults, under a --preset, changed by --set. `crucible
    task create --env` takes the file."""
    from protocol.files import write_text_atomic
    from protocol.ml.envs.presets import preset
    from protocol.ml.envs.spec import spec_with_settings

    document = preset(preset_name).document(name) if preset_name else {"environment": name}
    checked = spec_with_settings(document, settings)
    text = json.dumps(checked.model_dump(by_alias=True, mode="json"), indent=2, sort_keys=True)
    if out is None:
        print(text)
        return
    write_text_atomic(out, text + "\n")
    if json_output:
        emit_json({"out": str(out), "environment": checked.environment})
    else:
        stdout.print(f"spec of {checked.environment} written to {out}")
