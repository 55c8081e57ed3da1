"""`crucible env list|spec`."""

from __future__ import annotations

import json

import typer
from rich.table import Table

from cli.output import emit_json, stdout

app = typer.Typer(no_args_is_help=True, help="Verifiable environments and their specs.")

JSON = typer.Option(False, "--json", help="Print one JSON document on stdout.")


@app.command("list")
def list_(json_output: bool = JSON) -> None:
    """List the registered environments."""
    from protocol.ml.envs.registry import ENVIRONMENTS, environment_of

    environment_of("arithmetic")  # loads the registry
    rows = [{"name": name, "description": kind.description} for name, kind in sorted(ENVIRONMENTS.items())]
    if json_output:
        emit_json(rows)
        return
    table = Table("name", "description", title="Environments", title_justify="left")
    for row in rows:
        table.add_row(row["name"], row["description"])
    stdout.print(table)


@app.command()
def spec(
    name: str = typer.Argument(..., help="Environment name."),
    json_output: bool = typer.Option(False, "--json", help="The spec is JSON either way; accepted for scripts."),
) -> None:
    """Print an environment's default spec (JSON, the file `crucible task create --env` takes)."""
    from protocol.ml.envs.spec import default_spec

    document = default_spec(name).model_dump(by_alias=True, mode="json")
    print(json.dumps(document, indent=2, sort_keys=True))
