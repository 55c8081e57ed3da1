"""`crucible stake deposit|show|unstake|withdraw`."""

from __future__ import annotations

import typer

from cli.context import address_of, confirm_or_abort, context
from cli.output import emit_json, key_value_table, stdout
from protocol.chain.client import Role
from protocol.errors import ConfigError
from protocol.values import format_tokens

app = typer.Typer(no_args_is_help=True, help="Stake, inspect, unstake and withdraw.")

JSON = typer.Option(False, "--json", help="Print one JSON document on stdout.")
ACCOUNT = typer.Option("dev0", "--account", help="devN, env, a keystore name or address.")
YES = typer.Option(False, "--yes", help="Do not ask before sending.")


@app.command()
def deposit(
    ctx: typer.Context,
    amount: str = typer.Argument(..., help="Whole tokens to stake."),
    role: str = typer.Option(..., "--role", help="trainer or validator."),
    account: str = ACCOUNT,
    yes: bool = YES,
    json_output: bool = JSON,
) -> None:
    """Stake tokens for a role (approving the stake manager first when needed)."""
    if role not in ("trainer", "validator"):
        raise ConfigError(f"unknown role {role!r}: use trainer or validator")
    cli = context(ctx)
    crucible = cli.crucible()
    amount_wei = cli.tokens(amount, "stake amount")
    if amount_wei == 0:
        raise ConfigError("stake amount must be more than zero")
    signer = cli.signer(account)
    crucible.require_balance(signer.address, amount_wei, "stake")
    confirm_or_abort(
        f"Stake {format_tokens(amount_wei, crucible.decimals, crucible.symbol)} as {role} from {signer.address}?",
        yes,
    )
    crucible.stake(signer, amount_wei, Role.TRAINER if role == "trainer" else Role.VALIDATOR)
    _show(cli, signer.address, json_output)


@app.command()
def show(
    ctx: typer.Context,
    account: str = typer.Argument("dev0", help="Account name or address."),
    json_output: bool = JSON,
) -> None:
    """Show an account's stake: staked, unbonding, locked, in tokens."""
    _show(context(ctx), address_of(account), json_output)


def _show(cli: object, address: str, json_output: bool) -> None:
    from cli.context import CliContext

    assert isinstance(cli, CliContext)
    crucible = cli.crucible()
    state = crucible.stake_account(address)
    decimals = crucible.decimals
    if json_output:
        amounts = {"staked": state.staked, "unbonding": state.unbonding, "locked": state.locked, "free": state.free}
        amounts["credits"] = crucible.credit_of(address)
        document: dict[str, object] = {"address": address, "role": state.role.name.lower()}
        document |= {f"{name}_wei": str(value) for name, value in amounts.items()}
        emit_json(document | {"release_at": state.release_at})
        return
    symbol = crucible.symbol
    stdout.print(
        key_value_table(
            f"Stake of {address}",
            [
                ("role", state.role.name.lower()),
                ("staked", format_tokens(state.staked, decimals, symbol)),
                ("locked", format_tokens(state.locked, decimals, symbol)),
                ("free", format_tokens(state.free, decimals, symbol)),
                ("unbonding", format_tokens(state.unbonding, decimals, symbol)),
                ("release at", state.release_at or "-"),
                ("claimable credits", format_tokens(crucible.credit_of(address), decimals, symbol)),
            ],
        )
    )


@app.command()
def unstake(
    ctx: typer.Context,
    amount: str = typer.Argument(..., help="Whole tokens to move to unbonding."),
    account: str = ACCOUNT,
    yes: bool = YES,
    json_output: bool = JSON,
) -> None:
    """Request to unstake; the tokens can be withdrawn after the unbonding period."""
    cli = context(ctx)
    crucible = cli.crucible()
    amount_wei = cli.tokens(amount, "unstake amount")
    signer = cli.signer(account)
    free = crucible.stake_account(signer.address).free
    if amount_wei == 0 or amount_wei > free:
        raise ConfigError(
            f"unstake amount {amount} must be more than zero and at most the unlocked stake, "
            f"{format_tokens(free, crucible.decimals, crucible.symbol)}"
        )
    confirm_or_abort(f"Unstake {amount} from {signer.address}?", yes)
    crucible.request_unstake(signer, amount_wei)
    _show(cli, signer.address, json_output)


@app.command()
def withdraw(ctx: typer.Context, account: str = ACCOUNT, json_output: bool = JSON) -> None:
    """Withdraw stake whose unbonding period has passed."""
    cli = context(ctx)
    crucible = cli.crucible()
    signer = cli.signer(account)
    state = crucible.stake_account(signer.address)
    if state.unbonding == 0:
        raise ConfigError(f"nothing is unbonding for {signer.address}")
    crucible.withdraw(signer)
    _show(cli, signer.address, json_output)
