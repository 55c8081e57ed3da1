"""`crucible task create|list|show|refund`."""

from __future__ import annotations

import inspect
from typing import Any

import typer
from rich.table import Table

from cli.context import STORE_HELP, CliContext, confirm_or_abort, context
from cli.output import emit_json, key_value_table, stderr, stdout
from cli.task_checks import draft_task
from cli.task_plan import make_plan
from protocol.chain.client import Crucible
from protocol.chain.ids import checkpoint_digests, decode_submission_id, submission_text
from protocol.chain.params import (
    BPS,
    DEFAULT_COLLUDING_SHARE_PPM,
    PPM,
)
from protocol.errors import ConfigError
from protocol.values import format_tokens

app = typer.Typer(no_args_is_help=True, help="Create, list, show, finalise and refund tasks.")

JSON = typer.Option(False, "--json", help="Print one JSON document on stdout.")
ACCOUNT = typer.Option("dev0", "--account", help="devN, env, a keystore name or address.")
YES = typer.Option(False, "--yes", help="Do not ask before sending.")


@app.command()
def create(
    ctx: typer.Context,
    model: str = typer.Option(..., "--model", help="CID of the initial checkpoint manifest."),
    env: str = typer.Option(
        ...,
        "--env",
        help="An environment name (its default spec, as `crucible env spec NAME`), a spec file, or a spec CID.",
    ),
    bounty: str = typer.Option(..., "--bounty", help="Bounty in whole tokens, escrowed now."),
    rounds: int = typer.Option(..., "--rounds", help="Number of rounds."),
    sample_rate: float = typer.Option(0.5, "--sample-rate", help="Probability a submission is checked, in (0, 1]."),
    slash: str = typer.Option(None, "--slash", help="Trainer slash in tokens (default: the least that deters)."),
    validators_per_check: int = typer.Option(
        3, "--validators-per-check", help="Validators per sampled submission (1-16)."
    ),
    min_stake: str = typer.Option(
        None, "--min-stake", help="Stake a trainer locks per submission (default: the slash)."
    ),
    min_validator_stake: str = typer.Option(
        None, "--min-validator-stake", help="Stake a validator locks (default: --min-stake / 10)."
    ),
    validator_slash: str = typer.Option(
        None, "--validator-slash", help="Slash of a validator whose vote lost (default: slash / 10)."
    ),
    dispute_bond: str = typer.Option(
        None,
        "--dispute-bond",
        help="Bond of a dispute, lost unless upheld (default: the least with which no appeal pays, whole tokens).",
    ),
    validator_fee: float = typer.Option(0.1, "--validator-fee", help="Share of each round's budget for validators."),
    finder_share: float = typer.Option(
        0.5, "--finder-share", help="Share of a slash paid to those who found the fault."
    ),
    max_work_units: int = typer.Option(1_000_000, "--max-work-units", help="Most tokens one submission may claim."),
    submit_window: int = typer.Option(
        300, "--submit-window", help="Seconds from a round's opening to its submission deadline."
    ),
    validate_window: int = typer.Option(300, "--validate-window", help="Seconds for attestations."),
    challenge_window: int = typer.Option(300, "--challenge-window", help="Seconds for disputes."),
    colluding_share: float = typer.Option(
        DEFAULT_COLLUDING_SHARE_PPM / PPM,
        "--colluding-share",
        help="Largest share of validator stake assumed to vote with a cheat, in [0, 0.5); the deterrence check "
        "counts the chance they hold a check.",
    ),
    max_staleness: int = typer.Option(
        0,
        "--max-staleness",
        help="Rounds a submission's base checkpoint may lag its round (0-8). 0 keeps rounds sequential; 1 or 2 "
        "pipelines them: the next round opens when one stops taking work, and trainers never wait for validation.",
    ),
    canary_rate: float = typer.Option(
        0.0,
        "--canary-rate",
        help="Most canaries a round may reveal, as a share of its submissions, in [0, 0.5]: known-bad work you "
        "plant (crucible node run --canary) to slash validators who attest without checking; a revealed canary's "
        "share of the trainer budget pays those who caught it.",
    ),
    store: str = typer.Option(None, "--store", help=STORE_HELP + " The model and spec must be served there."),
    skip_availability_check: bool = typer.Option(
        False,
        "--skip-availability-check",
        help="Create the task without checking that --store serves the model and the spec.",
    ),
    trainers: int = typer.Option(3, "--trainers", help="Trainers the plan counts on (time and cost)."),
    device: str = typer.Option("cpu", "--device", help="Where the plan rehearses a round: cpu or cuda."),
    force: bool = typer.Option(
        False,
        "--force",
        help="Create the task even when the plan finds nothing for GRPO to learn from, or one validator address "
        "alone holds more than the declared colluding share.",
    ),
    account: str = ACCOUNT,
    yes: bool = YES,
    json_output: bool = JSON,
) -> None:
    """Create a task: shows its plan (`task plan`) and the deterrence ratio, asks, escrows the bounty and prints
    the task id. A task whose plan finds no reward signal is refused without --force."""
    cli = context(ctx)
    draft = draft_task(cli, locals())
    crucible, params = draft.crucible, draft.params
    signer = cli.signer(account)
    crucible.require_balance(signer.address, params.bounty_wei, "bounty")
    found = make_plan(crucible, params, model, draft.env_cid, store, trainers=trainers, device=device,
                      measure=not skip_availability_check)  # fmt: skip
    for line in found.lines:
        stderr.print(line, markup=False, highlight=False)
    if found.unlearnable and not force:
        raise ConfigError(
            "the plan found no reward signal in the initial model's answers: the bounty would buy no learning; "
            "change the spec as the plan suggests, or pass --force (nothing sent)"
        )
    if found.concentrated and not force:
        raise ConfigError(
            "one validator address alone holds more than the declared colluding share (--colluding-share "
            f"{params.colluding_share_ppm / PPM:g}) of the stake that could seat: the deterrence figure would not "
            "hold; wait for more validators, declare a larger share, or pass --force (nothing sent)"
        )
    ratio = params.deterrence
    stderr.print(draft.summary)
    bounty_text = format_tokens(params.bounty_wei, crucible.decimals, crucible.symbol)
    confirm_or_abort(f"Create the task, escrowing {bounty_text} from {signer.address}?", yes)
    task_id = crucible.create_task(signer, params, model, draft.env_cid)
    if json_output:
        emit_json(
            {
                "task_id": task_id,
                "env_cid": draft.env_cid,
                "deterrence_ratio": ratio if ratio != float("inf") else None,
            }
        )
    else:
        stdout.print(f"created task {task_id}")


def plan(ctx: typer.Context, **options: Any) -> None:
    """What the task would be, before anything is paid: will it learn (the initial model's reward signal on a
    sample of its prompts), will it be checked (validators staked against a check's positions), how long a round
    takes here and which windows keep trainers busy, what a round costs in gas. Sends nothing."""
    cli = context(ctx)
    draft = draft_task(cli, options)
    found = make_plan(draft.crucible, draft.params, options["model"], draft.env_cid, options["store"],
                      trainers=options["trainers"], device=options["device"],
                      measure=not options["skip_availability_check"])  # fmt: skip
    if options["json_output"]:
        emit_json(found.document | {"env_cid": draft.env_cid, "params": draft.params.as_json()})
        return
    for line in [*found.lines, draft.summary]:
        stdout.print(line, markup=False, highlight=False)


# `task plan` takes every option of `task create` but those that send (--yes, --force, --account): Typer reads
# them from the signature and the annotations given here.
_SENDING = ("yes", "force", "account")
plan.__signature__ = inspect.signature(create).replace(  # type: ignore[attr-defined]
    parameters=[p for p in inspect.signature(create).parameters.values() if p.name not in _SENDING]
)
plan.__annotations__ = {name: kind for name, kind in create.__annotations__.items() if name not in _SENDING}
app.command("plan")(plan)


@app.command("list")
def list_(ctx: typer.Context, json_output: bool = JSON) -> None:
    """List every task."""
    crucible = context(ctx).crucible()
    tasks = [(task_id, crucible.task(task_id)) for task_id in range(1, crucible.task_count() + 1)]
    decimals = crucible.decimals
    if json_output:
        emit_json(
            {
                "tasks": [
                    {
                        "task_id": task_id,
                        "creator": task.creator,
                        "bounty_wei": str(task.bounty),
                        "rounds": task.rounds,
                        "current_round": task.current_round,
                        "open_round": task.open_round,
                        "ended": task.ended,
                        "refundable_wei": str(task.pool),
                    }
                    for task_id, task in tasks
                ]
            }
        )
        return
    table = Table("id", "creator", "bounty", "round", "state", title="Tasks", title_justify="left")
    for task_id, task in tasks:
        state = "ended" if task.ended else "running"
        table.add_row(
            str(task_id),
            task.creator,
            format_tokens(task.bounty, decimals, crucible.symbol),
            f"{task.current_round + 1}/{task.rounds}",
            state,
        )
    stdout.print(table if tasks else "no tasks yet")


def task_document(crucible: Crucible, task_id: int) -> dict[str, Any]:
    """Returns a task with its rounds and submissions as plain data (amounts exact, as strings, in `*_wei`)."""
    task = crucible.task(task_id)
    model_cid, env_cid = crucible.task_cids(task_id)
    agreed = crucible.events("TaskMarket", "CheckpointAgreed", taskId=task_id)
    cid_of = checkpoint_digests(model_cid, [str(e["checkpointCid"]) for e in agreed])

    rounds = []
    for index in range(task.open_round + 1):
        state = crucible.round(task_id, index)
        deadlines = crucible.deadlines(task_id, index)
        submissions = []
        for event in crucible.submissions(task_id, index):
            sid = int(event["submissionId"])
            sub = crucible.submission(sid)
            submissions.append(
                {
                    "submission_id": submission_text(sid),
                    "trainer": decode_submission_id(sid)[2],
                    "rollout_cid": event["rolloutCid"],
                    "update_cid": event["updateCid"],
                    "work_units": sub.work_units,
                    "base_round": sub.base_round,
                    "sampled": crucible.is_sampled(sid),
                    "assigned": crucible.assigned_validators(sid),
                    "votes": bin(sub.voted_mask).count("1"),
                    "invalid_votes": bin(sub.invalid_mask).count("1"),
                    "rejected": sub.rejected,
                    "canary": sub.canary,
                    "disputed": sub.disputed,
                    "settled": sub.settled,
                }
            )
        rounds.append(
            {
                "round": index,
                "opened_at": state.opened_at,
                "submit_deadline": deadlines.submit,
                "validate_deadline": deadlines.validate,
                "challenge_deadline": deadlines.challenge,
                "work_seed": state.work_seed,
                "check_seed": state.check_seed,
                "checkpoint": state.checkpoint,
                "checkpoint_cid": cid_of.get(state.checkpoint),
                "agreed_next": state.agreed_next,
                "agreed_next_cid": cid_of.get(state.agreed_next),
                "finalised": state.finalised,
                "unverified": state.unverified,
                "seat_stake_wei": str(state.seat_stake),
                "included_units": state.included_units,
                "canaries": state.canaries,
                "open_disputes": state.open_disputes,
                "submissions": submissions,
            }
        )
    members = crucible.members_of(task_id)
    latest = max(agreed, key=lambda e: (int(e["round"]), int(e["blockNumber"])), default=None)
    return {
        "task_id": task_id,
        "creator": task.creator,
        "model_cid": model_cid,
        "env_cid": env_cid,
        # The newest agreed checkpoint (the trained model once the task ended), as `model eval` takes it.
        "checkpoint_cid": str(latest["checkpointCid"]) if latest else model_cid,
        "checkpoint_round": int(latest["round"]) if latest else None,
        "decimals": crucible.decimals,
        "symbol": crucible.symbol,
        "bounty_wei": str(task.bounty),
        "rounds": task.rounds,
        "current_round": task.current_round,
        "open_round": task.open_round,
        "max_staleness": task.max_staleness,
        "ended": task.ended,
        "refundable_wei": str(task.pool),
        "sample_rate": task.sample_rate_ppm / PPM,
        "validators_per_check": task.validators_per_check,
        "slash_wei": str(task.slash_amount),
        "validator_slash_wei": str(task.validator_slash),
        "min_trainer_stake_wei": str(task.min_trainer_stake),
        "min_validator_stake_wei": str(task.min_validator_stake),
        "dispute_bond_wei": str(task.dispute_bond),
        "validator_fee": task.validator_fee_bps / BPS,
        "finder_share": task.finder_share_bps / BPS,
        "max_work_units": task.max_work_units,
        "windows_s": {
            "submit": task.submit_window_s,
            "validate": task.validate_window_s,
            "challenge": task.challenge_window_s,
        },
        "colluding_share": crucible.task_params(task_id).colluding_share_ppm / PPM,
        "canary_rate": task.canary_rate_ppm / PPM,
        "validators": [member.account for member in members],
        "seats": [
            {"validator": member.account, "stake_wei": str(crucible.seat_of(task_id, member.account).stake)}
            for member in members
        ],
        "round_details": rounds,
    }


def _open_rounds(document: dict[str, Any]) -> str:
    """The live rounds as people read them: "2", or "2-3" while a round opened ahead of finality."""
    current, newest = document["current_round"], document["open_round"]
    return str(current) if newest == current else f"{current}-{newest}"


@app.command()
def show(ctx: typer.Context, task_id: int = typer.Argument(..., help="Task id."), json_output: bool = JSON) -> None:
    """Show a task, its rounds and its submissions."""
    crucible = context(ctx).crucible()
    document = task_document(crucible, task_id)
    if json_output:
        emit_json(document)
        return
    symbol, decimals = crucible.symbol, crucible.decimals

    def amount(key: str) -> str:
        return format_tokens(int(document[f"{key}_wei"]), decimals, symbol)

    last = document["rounds"] - 1
    stdout.print(
        key_value_table(
            f"Task {task_id}",
            [
                ("creator", document["creator"]),
                ("bounty", amount("bounty")),
                (
                    "round",
                    ("ended after round " + str(last))
                    if document["ended"]
                    else f"{_open_rounds(document)} open (rounds 0 to {last})",
                ),
                ("max staleness", document["max_staleness"]),
                ("sample rate", f"{document['sample_rate']:.0%}"),
                ("validators per check", document["validators_per_check"]),
                ("slash", amount("slash")),
                ("min trainer stake", amount("min_trainer_stake")),
                (
                    "windows (s)",
                    "submit {submit}, validate {validate}, challenge {challenge}".format(**document["windows_s"]),
                ),
                (
                    "validators",
                    f"{len(document['seats'])}, seat stake "
                    + format_tokens(sum(int(seat["stake_wei"]) for seat in document["seats"]), decimals, symbol),
                ),
                ("colluding share assumed", f"{document['colluding_share']:.1%}"),
                ("canary rate", f"{document['canary_rate']:.1%}" if document["canary_rate"] else "no canaries"),
                ("refundable now", amount("refundable")),
            ],
        )
    )
    # Whole, on lines of their own, so that they can be copied (a table would fold them).
    stdout.print(f"model        {document['model_cid']}\nenvironment  {document['env_cid']}")
    if document["checkpoint_round"] is not None:
        trained = "trained     " if document["ended"] else "checkpoint  "
        stdout.print(f"{trained} {document['checkpoint_cid']} (agreed in round {document['checkpoint_round']})")
    for round_doc in document["round_details"]:
        table = Table(
            "trainer",
            "units",
            "sampled",
            "votes (invalid)",
            "outcome",
            "settled",
            title=f"Round {round_doc['round']}" + (" (final)" if round_doc["finalised"] else ""),
            title_justify="left",
        )
        for sub in round_doc["submissions"]:
            outcome = "canary" if sub["canary"] and sub["rejected"] else "rejected" if sub["rejected"] else "included"
            table.add_row(
                sub["trainer"],
                str(sub["work_units"]),
                "yes" if sub["sampled"] else "no",
                f"{sub['votes']} ({sub['invalid_votes']})",
                outcome + (" (disputed)" if sub["disputed"] else ""),
                "yes" if sub["settled"] else "no",
            )
        stdout.print(table if round_doc["submissions"] else f"Round {round_doc['round']}: no submissions")


@app.command()
def finalise(
    ctx: typer.Context,
    task_id: int = typer.Argument(..., help="Task id."),
    account: str = ACCOUNT,
    yes: bool = YES,
    json_output: bool = JSON,
) -> None:
    """Close the task's current round once its windows passed (anyone; a round nobody worked on too)."""
    cli: CliContext = context(ctx)
    crucible = cli.crucible()
    task = crucible.task(task_id)
    if task.ended:
        raise ConfigError(f"task {task_id} has ended: nothing to finalise")
    round_index = task.current_round
    closes = crucible.final_from(task_id, round_index)
    now = crucible.chain.now()
    if now < closes:
        raise ConfigError(
            f"round {round_index} of task {task_id} is open until {closes} ({closes - now} s from now): "
            "it can be finalised after its challenge window"
        )
    state = crucible.round(task_id, round_index)
    if state.open_disputes:
        raise ConfigError(f"round {round_index} of task {task_id} has {state.open_disputes} dispute(s) open")
    signer = cli.signer(account)
    confirm_or_abort(f"Finalise round {round_index} of task {task_id}?", yes)
    # A round whose check seed was not fixed by its validate deadline was never checked: the market
    # finalises it unverified (nothing in it paid or slashed), whoever fixes a seed now.
    unverified = bool(state.submission_count) and state.check_seed == bytes(32)
    crucible.finalise_round(signer, task_id)
    ended = crucible.task(task_id).ended
    if json_output:
        emit_json({"task_id": task_id, "round": round_index, "task_ended": ended, "unverified": unverified})
    else:
        stdout.print(
            f"finalised round {round_index} of task {task_id}"
            + (" unverified: its check never started, nothing in it is paid or slashed" if unverified else "")
            + ("; the task has ended" if ended else "")
        )


@app.command()
def refund(
    ctx: typer.Context,
    task_id: int = typer.Argument(..., help="Task id."),
    account: str = ACCOUNT,
    yes: bool = YES,
    json_output: bool = JSON,
) -> None:
    """Take back what an ended task did not pay out (the creator only)."""
    cli: CliContext = context(ctx)
    crucible = cli.crucible()
    task = crucible.task(task_id)
    signer = cli.signer(account)
    if signer.address != task.creator:
        raise ConfigError(f"only the creator {task.creator} can refund task {task_id}")
    if not task.ended:
        raise ConfigError(f"task {task_id} has not ended: round {task.current_round} (of 0-{task.rounds - 1}) is open")
    if task.pool == 0:
        raise ConfigError(f"task {task_id} has nothing to refund")
    confirm_or_abort(f"Refund {format_tokens(task.pool, crucible.decimals, crucible.symbol)} of task {task_id}?", yes)
    amount = crucible.refund(signer, task_id)
    if json_output:
        emit_json({"task_id": task_id, "refunded_wei": str(amount)})
    else:
        stdout.print(f"refunded {format_tokens(amount, crucible.decimals, crucible.symbol)} of task {task_id}")
