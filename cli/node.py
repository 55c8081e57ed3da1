"""`crucible node run`: a trainer node."""

from __future__ import annotations

import typer

from cli.context import STORE_HELP, context
from cli.output import stderr
from protocol.errors import ConfigError

app = typer.Typer(no_args_is_help=True, help="Run a trainer node.")


@app.command()
def run(
    ctx: typer.Context,
    task: int = typer.Option(..., "--task", help="The task id."),
    account: str = typer.Option(..., "--account", help="devN, env, a keystore name: the staked trainer."),
    rounds: int = typer.Option(None, "--rounds", help="Exit after taking part in this many rounds (settled, claimed)."),
    device: str = typer.Option("cpu", "--device", help="cpu or cuda."),
    store: str = typer.Option(None, "--store", help=STORE_HELP),
    batch_size: int = typer.Option(64, "--batch-size", help="Completions generated at once."),
    poll: float = typer.Option(1.0, "--poll", help="Seconds between looks at the chain."),
    adversary: str = typer.Option(None, "--adversary", help="Red-team strategy for devnets (see docs/node.md)."),
    force_adversary: bool = typer.Option(False, "--force-adversary", help="Allow --adversary off the devnet."),
    dispute: bool = typer.Option(
        None, "--dispute/--no-dispute", help="Dispute a rejection of its work (default: unless an adversary)."
    ),
    canary: bool = typer.Option(
        False, "--canary", help="Plant the task creator's canaries: known-bad work, revealed after the votes."
    ),
    creator_account: str = typer.Option(
        None, "--creator-account", help="With --canary: the task's creator (devN, env, a keystore name), who reveals."
    ),
    json_output: bool = typer.Option(False, "--json", help="Print events as JSON lines on stdout."),
) -> None:
    """Train on a task: fetch each round's checkpoint, generate with proofs, train, submit, claim."""
    from node.adversary import adversary_of
    from node.canary import Canary
    from node.runner import NodeOptions, TrainerNode
    from protocol.artifacts.backends import open_store
    from protocol.ml.model import checked_device
    from protocol.runtime.reporter import Reporter

    if rounds is not None and rounds < 1:
        raise ConfigError(f"--rounds must be at least 1, got {rounds}")
    if batch_size < 1 or poll <= 0:
        raise ConfigError("--batch-size must be at least 1 and --poll above 0")
    if canary != (creator_account is not None):
        raise ConfigError("--canary and --creator-account go together: the creator reveals its canaries")
    if canary and adversary is not None:
        raise ConfigError("--canary picks its own faults: leave out --adversary")
    cli = context(ctx)
    options = NodeOptions(
        task_id=task,
        rounds=rounds,
        device=checked_device(device),
        batch_size=batch_size,
        poll_s=poll,
        adversary=adversary_of(adversary),
        force_adversary=force_adversary,
        dispute=dispute,
        canary=Canary(cli.signer(creator_account)) if canary else None,
    )
    signer = cli.signer(account)
    node = TrainerNode(
        cli.crucible(), signer, open_store(store, signer), options, Reporter("node", json_output, stderr)
    )
    node.run()
