"""`crucible account new|import|list`."""

from __future__ import annotations

import getpass
from pathlib import Path

import typer
from rich.table import Table

from cli.output import emit_json, stdout
from protocol.accounts import import_keystore, list_accounts, new_keystore
from protocol.errors import ConfigError

app = typer.Typer(no_args_is_help=True, help="Create, import and list accounts (keys are never printed).")

JSON = typer.Option(False, "--json", help="Print one JSON document on stdout.")


@app.command()
def new(name: str = typer.Argument(..., help="A name for the keystore."), json_output: bool = JSON) -> None:
    """Create a key and store it encrypted (password from CRUCIBLE_PASSWORD or a prompt)."""
    info = new_keystore(name)
    if json_output:
        emit_json(info)
    else:
        stdout.print(f"created account {info.name}: {info.address}")


@app.command("import")
def import_(
    name: str = typer.Argument(..., help="A name for the keystore."),
    private_key_file: Path = typer.Option(
        None, "--private-key-file", help="Read the key from this file (else a hidden prompt)."
    ),
    json_output: bool = JSON,
) -> None:
    """Import a private key into an encrypted keystore. The key is never taken as an argument."""
    if private_key_file is not None:
        if not private_key_file.exists():
            raise ConfigError(f"no such file: {private_key_file}")
        key = private_key_file.read_text().strip()
    else:
        try:
            key = getpass.getpass("Private key: ")
        except EOFError:
            raise ConfigError("a private key is needed: use --private-key-file or run in a terminal") from None
    info = import_keystore(name, key)
    if json_output:
        emit_json(info)
    else:
        stdout.print(f"imported account {info.name}: {info.address}")


@app.command("list")
def list_(json_output: bool = JSON) -> None:
    """List the devnet accounts, keystores and the environment's key, by address."""
    accounts = list_accounts()
    if json_output:
        emit_json({"accounts": accounts})
        return
    table = Table("name", "address", "kind", title="Accounts", title_justify="left")
    for account in accounts:
        table.add_row(account.name, account.address, account.kind)
    stdout.print(table)
