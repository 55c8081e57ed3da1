"""`crucible account new|import|list|balance|fund`."""

from __future__ import annotations

import getpass
import sys
from pathlib import Path

import typer
from rich.table import Table

from cli.context import confirm_or_abort, context
from cli.output import emit_json, key_value_table, stdout
from protocol.accounts import import_keystore, list_accounts, new_keystore, resolve_address
from protocol.chain import devnet
from protocol.config import devnet_settings
from protocol.errors import ConfigError
from protocol.values import format_tokens, to_wei

app = typer.Typer(
    no_args_is_help=True,
    help="Create, import and list accounts, see a balance, fund one on the devnet (keys are never printed).",
)

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
    elif not sys.stdin.isatty():  # getpass would warn it cannot hide the input, then read the pipe
        raise ConfigError("a private key is needed: use --private-key-file or run in a terminal")
    else:
        key = getpass.getpass("Private key: ")
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


@app.command()
def balance(
    ctx: typer.Context,
    account: str = typer.Argument(..., help="devN, env, a keystore name or an address."),
    json_output: bool = JSON,
) -> None:
    """The account's ether (for gas) and tokens (for bounties, stake and bonds)."""
    crucible = context(ctx).crucible()
    address = resolve_address(account)
    ether_wei = crucible.chain.w3.eth.get_balance(address)  # type: ignore[arg-type]
    tokens_wei = crucible.balance_of(address)
    if json_output:
        emit_json({"address": address, "ether_wei": str(ether_wei), "tokens_wei": str(tokens_wei)})
        return
    decimals, symbol = crucible.decimals, crucible.symbol
    rows = [("ether", format_tokens(ether_wei, 18, "ETH")), ("tokens", format_tokens(tokens_wei, decimals, symbol))]
    stdout.print(key_value_table(address, rows))


@app.command()
def fund(
    ctx: typer.Context,
    account: str = typer.Argument(..., help="A keystore name or an address to fund."),
    tokens: str = typer.Option("1000", "--tokens", help="Whole tokens to send from --from."),
    ether: str = typer.Option("10", "--ether", help="Ether to give it for gas (Anvil sets the balance)."),
    sender: str = typer.Option("dev0", "--from", help="The devnet account the tokens come from."),
    yes: bool = typer.Option(False, "--yes", help="Do not ask before sending."),
    json_output: bool = JSON,
) -> None:
    """Give an account ether and tokens on the devnet (refused on any other chain)."""
    cli = context(ctx)
    crucible = cli.crucible()
    if crucible.chain.chain_id != devnet_settings().chain_id:
        raise ConfigError(
            f"account fund is for the devnet ({devnet_settings().chain_id}), not chain {crucible.chain.chain_id}"
        )
    address = resolve_address(account)
    tokens_wei = cli.tokens(tokens, "--tokens")
    ether_wei = to_wei(ether, 18, "--ether")
    signer = cli.signer(sender)
    crucible.require_balance(signer.address, tokens_wei, "--tokens")
    shown = f"{format_tokens(ether_wei, 18, 'ETH')} and {format_tokens(tokens_wei, crucible.decimals, crucible.symbol)}"
    confirm_or_abort(f"Give {address} {shown}?", yes)
    balance_now = crucible.chain.w3.eth.get_balance(address)  # type: ignore[arg-type]
    devnet.set_balance(crucible.chain, address, balance_now + ether_wei)
    if tokens_wei:
        crucible.transfer(signer, address, tokens_wei)
    if json_output:
        emit_json({"address": address, "ether_wei": str(ether_wei), "tokens_wei": str(tokens_wei)})
    else:
        stdout.print(f"funded {address}: {shown}")
