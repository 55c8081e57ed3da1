"""`crucible validator run`: a validator."""

from __future__ import annotations

import typer

from cli.context import STORE_HELP, context
from cli.output import stderr
from protocol.errors import ConfigError

app = typer.Typer(no_args_is_help=True, help="Run a validator.")


@app.command()
def run(
    ctx: typer.Context,
    task: int = typer.Option(..., "--task", help="The task id."),
    account: str = typer.Option(..., "--account", help="devN, env, a keystore name: the staked validator."),
    rounds: int = typer.Option(None, "--rounds", help="Exit once this many rounds are final (settled, claimed)."),
    device: str = typer.Option("cpu", "--device", help="cpu or cuda."),
    store: str = typer.Option(None, "--store", help=STORE_HELP),
    poll: float = typer.Option(1.0, "--poll", help="Seconds between looks at the chain."),
    adversary: str = typer.Option(None, "--adversary", help="Red-team validator for devnets: lazy or liar."),
    force_adversary: bool = typer.Option(False, "--force-adversary", help="Allow --adversary off the devnet."),
    dispute: bool = typer.Option(True, "--dispute/--no-dispute", help="Dispute acceptances it found invalid."),
    seat_stake: str = typer.Option(
        None,
        "--seat-stake",
        help="Tokens to lock when joining (default: the task's minimum): the seat's weight in every draw.",
    ),
    json_output: bool = typer.Option(False, "--json", help="Print events as JSON lines on stdout."),
) -> None:
    """Validate a task: check assigned submissions, attest with evidence, aggregate, vote on disputes, claim."""
    from protocol.artifacts.backends import open_store
    from protocol.ml.model import checked_device
    from protocol.runtime.reporter import Reporter
    from validator.adversary import adversary_of
    from validator.runner import Validator, ValidatorOptions

    if rounds is not None and rounds < 1:
        raise ConfigError(f"--rounds must be at least 1, got {rounds}")
    if poll <= 0:
        raise ConfigError("--poll must be above 0")
    options = ValidatorOptions(
        task_id=task,
        rounds=rounds,
        device=checked_device(device),
        poll_s=poll,
        adversary=adversary_of(adversary),
        force_adversary=force_adversary,
        dispute=dispute,
    )
    cli = context(ctx)
    if seat_stake is not None:
        options.seat_stake_wei = cli.tokens(seat_stake, "seat stake")
    signer = cli.signer(account)
    validator = Validator(
        cli.crucible(), signer, open_store(store, signer), options, Reporter("validator", json_output, stderr)
    )
    validator.run()
