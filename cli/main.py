"""The `crucible` entry point: global options, command groups, and one line per error."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any, get_args, get_origin

import typer
from typer._click.exceptions import MissingParameter, NoSuchOption  # not re-exported by typer (pinned in pyproject)
from typer.core import TyperArgument, TyperOption

from cli import account, artifacts, audit, devnet, env, explorer, model, node, stake, task, validator
from cli.context import CliContext, fee_lines
from cli.output import stderr
from protocol.errors import CrucibleError

app = typer.Typer(
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    help="Crucible: verifiable, incentivised decentralised RL training on an EVM chain.",
)
app.add_typer(devnet.app, name="devnet")
app.add_typer(task.app, name="task")
app.add_typer(stake.app, name="stake")
app.add_typer(account.app, name="account")
app.add_typer(artifacts.app, name="artifacts")
app.add_typer(artifacts.relay_app, name="relay")
app.add_typer(model.app, name="model")
app.add_typer(env.app, name="env")
app.add_typer(node.app, name="node")
app.add_typer(validator.app, name="validator")
app.add_typer(audit.app, name="audit")
app.add_typer(explorer.app, name="explorer")
app.command("deploy")(devnet.deploy_command)


def _print_version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        print(f"crucible {version('crucible')}")
        raise typer.Exit()


@app.callback()
def main(
    ctx: typer.Context,
    rpc: str = typer.Option(None, "--rpc", help="RPC URL (default: the devnet `crucible devnet up` started)."),
    deployment: Path = typer.Option(None, "--deployment", help="Address book (default: deployments/<chainId>.json)."),
    version: bool = typer.Option(
        False, "--version", is_eager=True, callback=_print_version, help="Print the version and exit."
    ),
) -> None:
    """Global options come before the command."""
    ctx.obj = CliContext(rpc=rpc, deployment_path=deployment)


@app.command()
def demo(
    rounds: int | None = typer.Option(None, "--rounds", help="Rounds of training (default: 3; 5 for a made-up model)."),
    trainers: int = typer.Option(3, "--trainers", help="Trainer nodes (separate processes)."),
    validators: int = typer.Option(2, "--validators", help="Validators (separate processes)."),
    adversary: list[str] = typer.Option(
        ["inflated-rewards"], "--adversary", help="A cheating trainer's strategy (repeatable)."
    ),
    no_adversary: bool = typer.Option(False, "--no-adversary", help="Every trainer honest."),
    env: str | None = typer.Option(
        None,
        "--env",
        help="Environment name (`crucible env list`) or spec file (default: reasoning-gym/chain_sum; arithmetic "
        "for a made-up model).",
    ),
    model: str = typer.Option(
        "smollm2",
        "--model",
        help="smollm2 (SmolLM2-135M-Instruct, LoRA updates), a Hugging Face folder, or a model made and warmed "
        "up here: tiny, small or base.",
    ),
    size: str | None = typer.Option(None, "--size", hidden=True, help="Same as --model tiny|small|base."),
    settings: list[str] = typer.Option([], "--set", help="A spec setting, key=value (as `crucible env spec`)."),
    eval_problems: int = typer.Option(
        500, "--eval-problems", help="Held-out problems of the gain, the same before and after."
    ),
    eval_sampled: bool = typer.Option(
        False, "--eval-sampled", help="Also answer the held-out problems sampled as the task samples."
    ),
    warmup_steps: int = typer.Option(600, "--warmup-steps", help="Supervised warm-up steps of the initial model."),
    prompts: int | None = typer.Option(
        None, "--prompts", help="Prompts each trainer answers per round, 1 to 512 (default: 12; 256 made-up)."
    ),
    minibatch: int | None = typer.Option(
        None, "--minibatch", help="Sequences per optimizer step of the update (0: all in one; default: the spec's)."
    ),
    max_staleness: int = typer.Option(
        0,
        "--max-staleness",
        help="Pipelined rounds: how many rounds a submission's base may lag (0-8; 0: sequential rounds).",
    ),
    keep: bool = typer.Option(False, "--keep", help="Serve the explorer afterwards, until Ctrl-C."),
    port: int = typer.Option(8600, "--port", help="The explorer's port with --keep."),
    unsafe_no_validation: bool = typer.Option(
        False, "--unsafe-no-validation", help="Validators attest without checking: shows what cheats then do."
    ),
    validator_adversary: list[str] = typer.Option(
        [], "--validator-adversary", help="A validator's red-team strategy, lazy or liar (repeatable: the first ones)."
    ),
    canary_rate: float = typer.Option(
        0.0,
        "--canary-rate",
        help="The task's canary rate (0 to 0.5); above 0, canary nodes plant the creator's known-bad work every round.",
    ),
    store: str = typer.Option(
        "local", "--store", help="local (one shared folder) or kubo (an IPFS daemon started for the run)."
    ),
    client: str = typer.Option(
        "anvil", "--client", help="The private devnet's EVM client: anvil (Foundry) or hardhat (Hardhat's EDR)."
    ),
    json_output: bool = typer.Option(False, "--json", help="Print one JSON summary on stdout."),
) -> None:
    """Run a whole decentralised RL task on a private devnet: trainers (one cheating) and validators as
    separate processes, rounds of verified training, then accuracy, stakes, rewards and the money check."""
    from cli.demo import run_demo
    from demo.options import DemoOptions

    options = DemoOptions(
        rounds=rounds,
        trainers=trainers,
        validators=validators,
        adversaries=[] if no_adversary else list(adversary),
        env=env,
        model=size or model,
        settings=list(settings),
        eval_problems=eval_problems,
        eval_sampled=eval_sampled,
        warmup_steps=warmup_steps,
        prompts=prompts,
        minibatch=minibatch,
        max_staleness=max_staleness,
        keep=keep,
        port=port,
        unsafe_no_validation=unsafe_no_validation,
        validator_adversaries=list(validator_adversary),
        canary_rate=canary_rate,
        store=store,
        client=client,
    )
    run_demo(options, json_output)


# Help as Click users know it: a flag shows no type, a value its kind in capitals (TEXT, INTEGER,
# PATH; "..." when repeatable), an argument its name in capitals. Typer 0.29 prints `<bool>`,
# `<list[str]>` and `{name}` instead, from three methods of its parameter classes, replaced here
# (the version is pinned in pyproject.toml; tests/integration/test_cli.py checks the help text).
_KINDS = {int: "INTEGER", float: "NUMBER", bool: "BOOLEAN", Path: "PATH"}


def _kind(param: Any) -> str:
    annotation = param.type_descriptor.annotation
    repeated = get_origin(annotation) is list
    kind = get_args(annotation)[0] if repeated else annotation
    return _KINDS.get(kind, "TEXT") + ("..." if repeated else "")


def _option_type(self: TyperOption, ctx: Any) -> str:
    return "" if self.is_flag else self.metavar or _kind(self)


def _argument_type(self: TyperArgument, ctx: Any) -> str:
    return _kind(self)


def _argument_name(self: TyperArgument) -> str:
    name = self.metavar or str(self.name).upper()
    return name if self.required else f"[{name}]"


TyperOption.display_type_rich = _option_type  # type: ignore[method-assign]
TyperArgument.display_type_rich = _argument_type  # type: ignore[method-assign, assignment]
TyperArgument._usage_display_name = _argument_name  # type: ignore[method-assign]
TyperArgument._rich_display_name = lambda self: str(self.name).upper()  # type: ignore[method-assign]


# A negative number where a command takes an argument: Click reads `-1` as an option it does not know.
NEGATIVE = re.compile(r"-[0-9][0-9.eE+-]*")


def run() -> None:
    """Runs the CLI; a CrucibleError becomes one line on stderr and exit status 1."""
    try:
        result = app(standalone_mode=False)
    except CrucibleError as error:
        stderr.print(f"error: {error}", markup=False, highlight=False)
        sys.exit(1)
    except typer.Abort:
        stderr.print("aborted: nothing was sent")
        sys.exit(1)
    except typer.BadParameter as error:
        if isinstance(error, MissingParameter):  # a missing value is a usage error: Click's text and exit 2
            error.show()
            sys.exit(2)
        # A value given but wrong (`task show abc`) is bad input: one line, exit 1.
        message = error.format_message()
        stderr.print(f"error: {message[:1].lower()}{message[1:]}", markup=False)
        sys.exit(1)
    except NoSuchOption as error:
        if not NEGATIVE.fullmatch(error.option_name):
            error.show()
            sys.exit(2)
        # Every number a command takes as an argument (amounts, ids) is non-negative; Click reads `-1` as an option.
        stderr.print(f"error: {error.option_name} is negative: amounts and ids are 0 or more", markup=False)
        sys.exit(1)
    except typer.TyperException as error:
        # Usage errors (typer vendors click, so its exceptions are typer's own).
        show = getattr(error, "show", None)
        if callable(show):
            show()
        else:
            stderr.print(f"error: {error}", markup=False)
        sys.exit(int(getattr(error, "exit_code", 2)))
    except KeyboardInterrupt:
        result = 130
    # Typer answers Ctrl-C by returning 130 (with standalone_mode off), not by raising.
    if result == 130:
        stderr.print("interrupted")
        sys.exit(130)
    # What the command's transactions paid, on stderr (stdout stays the command's output, --json included).
    for line in fee_lines():
        stderr.print(line, markup=False, highlight=False)
    # A command that raised typer.Exit(code) (an audit with findings) returns its code here.
    if isinstance(result, int) and result:
        sys.exit(result)
