"""`crucible demo`: a whole decentralised RL task on a private devnet, every role a separate process."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from cli.output import emit_json, stderr, stdout
from protocol.values import format_tokens


@contextmanager
def _progress(quiet: bool) -> Iterator[Callable[[str, int, int], None]]:
    """`stage(description, done, total)`: a Rich progress bar with elapsed time on a terminal; else (and
    with --json) one line per new phase on stderr with the time since the start, so a log or a
    supervisor sees where the demo is while stdout keeps its one JSON document."""
    if quiet or not stderr.is_terminal:
        started = time.monotonic()
        last: list[str] = []

        def line(description: str, done: int, total: int) -> None:
            if last[-1:] != [description]:
                last.append(description)
                minutes, seconds = divmod(int(time.monotonic() - started), 60)
                stderr.print(f"[{minutes:02d}:{seconds:02d}] {description}", markup=False, highlight=False)

        yield line
        return
    columns = (TextColumn("{task.description:<44}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=stderr, transient=True) as bar:
        task = bar.add_task("starting", total=1)

        def stage(description: str, done: int, total: int) -> None:
            bar.update(task, description=description, completed=done, total=total)

        yield stage


def run_demo(options: Any, json_output: bool) -> None:
    """Runs the demo and prints its summary (or one JSON document); with `options.keep`, then serves
    the explorer until Ctrl-C. Every process it started is stopped on the way out."""
    from demo.runner import Demo

    def say(message: str) -> None:
        if not json_output:
            stderr.print(message)

    with _progress(json_output) as stage, Demo(options, say, stage) as demo:
        summary = demo.run()
        if options.keep:
            summary["explorer"] = demo.keep()
        _print(summary, json_output)
        if options.keep:
            say(f"explorer at {summary['explorer']}: Ctrl-C stops it, the devnet and everything else")
            demo.wait_forever()


def _print(summary: dict[str, Any], json_output: bool) -> None:
    if json_output:
        emit_json(summary)
        return
    rounds = Table(
        "checkpoint",
        "held-out greedy",
        "held-out sampled (the policy RL trains)",
        "mean reward of its rollouts",
        title="Accuracy: the initial and final checkpoints on held-out problems, every round's accepted rollouts",
        title_justify="left",
    )

    def percent(value: float | None) -> str:
        return "" if value is None else f"{100 * value:.1f}%"

    for row in summary["rounds"]:
        name = "initial" if row["round"] == 0 else f"after round {row['round']}"
        rounds.add_row(name, percent(row["accuracy"]), percent(row["sampled_accuracy"]), percent(row["rollout_reward"]))
    stdout.print(rounds)
    for row in summary["rounds"]:
        if row.get("updates"):
            shown = ", ".join(
                f"{u['trainer']} {'included' if u['included'] else 'rejected'}, staleness {u['staleness']}"
                for u in row["updates"]
            )
            stdout.print(f"round {row['round']} updates: {shown}")
    gain = summary["gain"]
    for kind, label in (("greedy", "greedy"), ("sampled", "sampled as the task samples")):
        figures = gain[kind]
        if figures is None:
            continue
        verdict = "a real gain" if figures["real"] else "no gain (the interval holds zero or is below it)"
        stdout.print(
            f"held-out reward, {label}: {100 * figures['mean']:+.1f} points, 95 % interval "
            f"[{100 * figures['low']:+.1f}, {100 * figures['high']:+.1f}] over {gain['problems']} problems: {verdict}"
        )
    accounts = Table(
        "account",
        "role",
        "stake before",
        "stake after",
        "rewards",
        "busy (compute / wall time)",
        title="Accounts",
        title_justify="left",
    )
    for row in summary["accounts"]:
        accounts.add_row(
            row["name"],
            row["role"],
            *(format_tokens(int(row[f"{key}_wei"]), 18, "CRU") for key in ("stake_before", "stake_after", "rewards")),
            percent(row.get("busy_fraction")),
        )
    stdout.print(accounts)
    check = summary["money_check"]

    def tokens(wei: str) -> str:
        return format_tokens(int(wei), 18)

    credited = sum(int(amount) for amount in check["out"]["credited_wei"].values())
    stdout.print(
        f"money check (CRU): bounty {tokens(check['in']['bounty_wei'])} + slashed "
        f"{tokens(check['in']['slashed_wei'])} + bonds {tokens(check['in']['dispute_bonds_wei'])} = credited "
        f"{tokens(str(credited))} + refunded {tokens(check['out']['refunded_wei'])} + held "
        f"{tokens(check['out']['held_wei'])}: {'balanced to the wei' if check['balanced'] else 'NOT balanced'}"
    )
    if "explorer" not in summary:
        stdout.print("explorer: run `crucible demo --keep` to browse the finished task")
