"""`crucible audit sync|task|round|submission|money|dispute`: the auditor's commands."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
from rich.table import Table

from cli.context import STORE_HELP, confirm_or_abort, context
from cli.output import emit_json, key_value_table, stderr, stdout
from protocol.chain.ids import decode_submission_id, parse_submission_id, submission_text
from protocol.errors import ConfigError
from protocol.values import format_tokens

app = typer.Typer(
    no_args_is_help=True,
    help="Rebuild history from the chain, re-run checks, balance the books, dispute. `task`, `round` and "
    "`submission` exit 1 when they find something wrong with what others did, 0 when clean.",
)

JSON = typer.Option(False, "--json", help="Print one JSON document on stdout.")
STORE = typer.Option(None, "--store", help=STORE_HELP)
INDEX = typer.Option(None, "--index", help="The SQLite event index (default: the state folder's, per deployment).")
CONFIRMATIONS = typer.Option(0, "--confirmations", help="Index only blocks this many deep.")
DEVICE = typer.Option("cpu", "--device", help="cpu or cuda, for the re-runs.")
RERUN = typer.Option(True, "--rerun/--no-rerun", help="Re-run every check (default) or only read the history.")


@contextmanager
def _auditor(
    ctx: typer.Context, store: str | None, index: Path | None, confirmations: int, device: str, rerun: bool
) -> Iterator[Any]:
    from auditor.audit import Auditor
    from auditor.index import open_index
    from protocol.artifacts.backends import open_store
    from protocol.ml.model import checked_device

    crucible = context(ctx).crucible()
    checked = checked_device(device)
    with open_index(crucible, index, confirmations) as event_index:
        _sync(event_index)
        yield Auditor(crucible, event_index, open_store(store), checked, rerun)


def _sync(event_index: Any) -> Any:
    columns = (TextColumn("indexing blocks"), BarColumn(), MofNCompleteColumn())
    with Progress(*columns, console=stderr, transient=True, disable=not stderr.is_terminal) as bar:
        task = bar.add_task("index", total=None)
        return event_index.sync(lambda done, total: bar.update(task, completed=done, total=total))


@app.command()
def sync(ctx: typer.Context, index: Path = INDEX, confirmations: int = CONFIRMATIONS, json_output: bool = JSON) -> None:
    """Bring the event index up to date (resumes where it stopped, repairs reorgs)."""
    import time

    from auditor.index import open_index

    crucible = context(ctx).crucible()
    started = time.perf_counter()
    with open_index(crucible, index, confirmations) as event_index:
        report = _sync(event_index)
        document = {
            "index": str(event_index.path),
            "from_block": report.from_block,
            "to_block": report.to_block,
            "events": report.events,
            "total_events": len(event_index.rows()),
            "reorged_from": report.reorged_from,
            "seconds": round(time.perf_counter() - started, 3),
        }
    if json_output:
        emit_json(document)
    else:
        stdout.print(key_value_table("Event index", list(document.items())))


def _notes_table(notes: list[str]) -> Table:
    table = Table(title="Could not verify (the auditor's own faults, not findings)", title_justify="left")
    table.add_column("note", style="yellow")
    for note in notes:
        table.add_row(note)
    return table


def _report_end(findings: list[Any], notes: list[str], clean: str) -> None:
    """Prints the notes and findings; exits 1 when there are findings (as pip-audit and cargo-audit do)."""
    if notes:
        stdout.print(_notes_table(notes))
    stdout.print(_findings_table(findings) if findings else f"[green]{clean}")
    if findings:
        raise typer.Exit(1)


def _findings_table(findings: list[Any]) -> Table:
    table = Table(title="Findings", title_justify="left")
    table.add_column("kind", style="bold red")
    table.add_column("finding")
    for finding in findings:
        table.add_row(finding.kind, finding.message)
    return table


def _submissions_table(title: str, submissions: list[Any], decimals: int, symbol: str) -> Table:
    table = Table(title=title, title_justify="left")
    for column in ("submission", "trainer", "sampled", "votes", "outcome", "re-run", "reward", "slashed"):
        table.add_column(column)
    for s in submissions:
        rerun = "-" if s.rerun is None else ("valid" if s.rerun.valid else f"invalid: {s.rerun.failed_check}")
        votes = " ".join(("✔" if v.valid else "✘") for v in s.votes) or "-"
        table.add_row(
            submission_text(s.submission),
            s.trainer,
            "yes" if s.sampled else "no",
            votes,
            s.outcome,
            rerun,
            format_tokens(s.reward_wei, decimals, symbol),
            format_tokens(s.slashed_wei, decimals, symbol),
        )
    return table


def _money_table(money: Any, decimals: int, symbol: str) -> Table:
    rows: list[tuple[str, Any]] = [
        ("bounty", format_tokens(money.bounty, decimals, symbol)),
        ("slashed (in)", format_tokens(money.slashed, decimals, symbol)),
        ("dispute bonds (in)", format_tokens(money.bonds, decimals, symbol)),
    ]
    rows += [(f"credited: {kind}", format_tokens(amount, decimals, symbol)) for kind, amount in money.credited.items()]
    rows += [
        ("refunded", format_tokens(money.refunded, decimals, symbol)),
        ("still held", format_tokens(money.held, decimals, symbol)),
        ("balanced", "yes, to the wei" if money.balanced else f"NO: off by {money.total_in - money.total_out} wei"),
    ]
    return key_value_table("Money check", rows)


@app.command()
def task(
    ctx: typer.Context,
    task_id: int = typer.Argument(..., help="The task id."),
    store: str = STORE,
    index: Path = INDEX,
    confirmations: int = CONFIRMATIONS,
    device: str = DEVICE,
    rerun: bool = RERUN,
    evaluate: bool = typer.Option(True, "--evaluate/--no-evaluate", help="Held-out accuracy of each checkpoint."),
    html: Path = typer.Option(None, "--html", help="Also write a self-contained HTML report to this file."),
    json_output: bool = JSON,
) -> None:
    """Audit a whole task: history, every submission re-run, checkpoints recomputed, money balanced."""
    with _auditor(ctx, store, index, confirmations, device, rerun) as auditor:
        with stderr.status(f"auditing task {task_id}", spinner="dots"):
            audit = auditor.task(task_id, evaluate_model=evaluate)
        document = audit.as_json()
        if html is not None:
            decimals, symbol = auditor.crucible.decimals, auditor.crucible.symbol
            _write_html(html, document, auditor.index.last_block, decimals, symbol)
    crucible = auditor.crucible
    if json_output:
        emit_json(document)
        raise typer.Exit(1 if audit.all_findings() else 0)
    decimals, symbol = crucible.decimals, crucible.symbol
    stdout.print(
        key_value_table(
            f"Task {task_id}",
            [
                ("creator", audit.creator),
                ("status", "ended" if audit.ended else "running"),
                ("validators", ", ".join(audit.validators) or "none"),
                ("events", len(audit.history)),
            ],
        )
    )
    for r in audit.rounds:
        accuracy = (
            "-" if r.accuracy is None else f"{100 * r.accuracy[0]:.1f}% greedy, {100 * r.accuracy[1]:.1f}% sampled"
        )
        stdout.print(_submissions_table(f"Round {r.round_index} (checkpoint accuracy {accuracy})", r.submissions,
                                        decimals, symbol))  # fmt: skip
    stdout.print(_money_table(audit.money, decimals, symbol))
    if html is not None:
        stdout.print(f"HTML report: {html}")
    _report_end(audit.all_findings(), audit.all_notes(), "No findings: every verdict matches the re-run.")


def _write_html(path: Path, document: dict[str, Any], indexed_block: int, decimals: int, symbol: str) -> None:
    """A report that stands alone: no links into an explorer, amounts in tokens, the final accuracy."""
    from explorer.app import templates
    from explorer.charts import line_chart
    from protocol.files import write_text_atomic

    labels = [f"r{r['round']}" for r in document["rounds"]]
    accuracy = [r["accuracy"] for r in document["rounds"]]
    sampled = [r["sampled_accuracy"] for r in document["rounds"]]
    charts = [
        line_chart("Held-out accuracy of each round's checkpoint", labels, {"greedy": accuracy, "sampled": sampled})
    ]
    totals = ("total_in", "total_out")
    money = {key: format_tokens(int(document["money_check"][f"{key}_wei"]), decimals, symbol) for key in totals}
    body = (
        templates()
        .get_template("report.html")
        .render(audit=document, charts=charts, indexed_block=indexed_block, money=money, standalone=True)
    )
    write_text_atomic(path, body)


@app.command("round")
def round_command(
    ctx: typer.Context,
    task_id: int = typer.Argument(..., help="The task id."),
    round_index: int = typer.Argument(..., help="The round."),
    store: str = STORE,
    index: Path = INDEX,
    confirmations: int = CONFIRMATIONS,
    device: str = DEVICE,
    rerun: bool = RERUN,
    json_output: bool = JSON,
) -> None:
    """Audit one round: its submissions re-run and its next checkpoint recomputed."""
    with (
        _auditor(ctx, store, index, confirmations, device, rerun) as auditor,
        stderr.status(f"auditing task {task_id} round {round_index}", spinner="dots"),
    ):
        audit = auditor.round(task_id, round_index)
    if json_output:
        emit_json(audit.as_json())
        raise typer.Exit(1 if audit.all_findings() else 0)
    crucible = auditor.crucible
    stdout.print(_submissions_table(f"Task {task_id} round {round_index}", audit.submissions, crucible.decimals,
                                    crucible.symbol))  # fmt: skip
    stdout.print(
        key_value_table(
            "Checkpoint",
            [
                ("opened on", audit.checkpoint_cid),
                ("agreed next", audit.agreed_cid or "none"),
                ("recomputed", audit.recomputed_cid or "-"),
            ],
        )
    )
    if audit.outer_step_notes:
        treated = Table(title="Outer step (notes, not findings: a large honest update is clipped too)",
                        title_justify="left")  # fmt: skip
        treated.add_column("what the outer step did")
        for line in audit.outer_step_notes:
            treated.add_row(line)
        stdout.print(treated)
    _report_end(audit.all_findings(), audit.all_notes(), "No findings.")


@app.command()
def submission(
    ctx: typer.Context,
    submission_id: str = typer.Argument(..., help="The submission id (decimal or 0x hex)."),
    store: str = STORE,
    index: Path = INDEX,
    confirmations: int = CONFIRMATIONS,
    device: str = DEVICE,
    rerun: bool = RERUN,
    json_output: bool = JSON,
) -> None:
    """Audit one submission: its history, assignment, votes and evidence, and the checks re-run."""
    value = parse_submission_id(submission_id)
    with (
        _auditor(ctx, store, index, confirmations, device, rerun) as auditor,
        stderr.status(f"auditing submission {submission_text(value)}", spinner="dots"),
    ):
        audit = auditor.submission(value)
    if json_output:
        emit_json(audit.as_json())
        raise typer.Exit(1 if audit.findings else 0)
    _print_submission(audit, auditor.crucible)


def _print_submission(audit: Any, crucible: Any) -> None:
    stdout.print(
        _submissions_table(
            f"Submission {submission_text(audit.submission)}", [audit], crucible.decimals, crucible.symbol
        )
    )
    if audit.votes:
        votes = Table(title="Votes", title_justify="left")
        for column in ("validator", "for", "vote", "evidence", "evidence says"):
            votes.add_column(column)
        for v in audit.votes:
            said = v.evidence_problem or (f"failed {v.evidence_check}" if v.evidence_check else "all checks passed")
            votes.add_row(v.validator, v.purpose, "valid" if v.valid else "invalid", v.evidence_cid, said)
        stdout.print(votes)
    if audit.unrevealed:
        stdout.print(f"Committed, not revealed: {', '.join(audit.unrevealed)}")
    if audit.rerun is not None:
        checks = Table(title="Re-run", title_justify="left")
        for column in ("check", "passed", "seconds", "reason"):
            checks.add_column(column)
        for result in audit.rerun.results:
            checks.add_row(result.check, "yes" if result.passed else "no", f"{result.seconds:.3f}", result.reason or "")
        stdout.print(checks)
    _report_end(audit.findings, audit.notes, "No findings.")


@app.command()
def money(
    ctx: typer.Context,
    task_id: int = typer.Argument(..., help="The task id."),
    index: Path = INDEX,
    confirmations: int = CONFIRMATIONS,
    json_output: bool = JSON,
) -> None:
    """Balance a task's tokens to the wei, and the market's balance against all it owes."""
    from auditor.index import open_index
    from auditor.money import market_balance_check, money_check

    crucible = context(ctx).crucible()
    with open_index(crucible, index, confirmations) as event_index:
        _sync(event_index)
        books = money_check(crucible, event_index, task_id)
        market = market_balance_check(crucible, event_index)
    if json_output:
        emit_json(books.as_json() | {"market": market})
    else:
        stdout.print(_money_table(books, crucible.decimals, crucible.symbol))
        decimals, symbol = crucible.decimals, crucible.symbol
        balance, owed = (format_tokens(int(market[key]), decimals, symbol) for key in ("balance_wei", "owed_wei"))
        verdict = "balanced to the wei" if market["balanced"] else "NOT balanced"
        stdout.print(f"market balance {balance}, owed {owed}: {verdict}")
    if not books.balanced or not market["balanced"]:
        raise ConfigError(f"task {task_id}'s books do not balance")


@app.command()
def dispute(
    ctx: typer.Context,
    submission_id: str = typer.Argument(..., help="The submission to dispute (decimal or 0x hex)."),
    account: str = typer.Option(..., "--account", help="devN, env, a keystore name: who pays the bond."),
    store: str = STORE,
    index: Path = INDEX,
    device: str = DEVICE,
    yes: bool = typer.Option(False, "--yes", help="Do not ask before sending."),
    json_output: bool = JSON,
) -> None:
    """Re-run a submission's checks and, when its outcome is wrong, dispute it with the task's bond."""
    from protocol.work.evidence import evidence_bytes, evidence_document

    value = parse_submission_id(submission_id)
    task_id, _, trainer = decode_submission_id(value)
    cli = context(ctx)
    signer = cli.signer(account)
    with _auditor(ctx, store, index, 0, device, True) as auditor:
        with stderr.status(f"re-running submission {submission_text(value)}", spinner="dots"):
            audit = auditor.submission(value)
        verdict = audit.rerun
        if verdict is None:
            raise ConfigError(f"nothing sent: {'; '.join(audit.notes) or 'the re-run did not run'}")
        if verdict.valid != audit.rejected:
            raise ConfigError(
                f"nothing to dispute: the re-run finds submission {submission_text(value)} "
                f"{'valid' if verdict.valid else 'invalid'} and the chain's outcome is {audit.outcome}"
            )
        if audit.rejected and audit.canary and signer.address == trainer:
            raise ConfigError(f"the canary's owner {trainer} may not dispute its reveal: anyone else may")
        if audit.rejected and not audit.canary and signer.address != trainer:
            raise ConfigError(f"only the trainer {trainer} may dispute the rejection of its submission")
        if not audit.rejected and signer.address == trainer:
            raise ConfigError("a trainer cannot dispute the acceptance of its own submission")
        voted_valid = any(
            v.purpose == "attest" and v.valid and v.validator.lower() == signer.address.lower() for v in audit.votes
        )
        if not audit.rejected and voted_valid:
            raise ConfigError(f"{signer.address} attested it valid: a checker may not dispute the acceptance it voted")
        crucible = auditor.crucible
        state = crucible.submission(value)
        if state.disputed:
            raise ConfigError(f"submission {submission_text(value)} is already disputed")
        crucible.require_committee(value)
        round_index = audit.round_index
        deadlines = crucible.deadlines(task_id, round_index)
        now = crucible.chain.now()
        if not deadlines.validate <= now < deadlines.challenge:
            raise ConfigError(
                f"outside the challenge window of task {task_id} round {round_index} "
                f"({deadlines.validate} to {deadlines.challenge}, now {now}): a dispute would be refused"
            )
        bond = crucible.task(task_id).dispute_bond
        crucible.require_balance(signer.address, bond, "dispute bond")
        claim_evidence = evidence_document(value, signer.address, auditor.claim(value), verdict, "audit")
        evidence_cid = auditor.store.put(evidence_bytes(claim_evidence))
        failed = f"{verdict.failed_check}: {verdict.results[-1].reason}" if not verdict.valid else "every check passed"
        stderr.print(
            f"Dispute submission {submission_text(value)} ({audit.outcome} on chain; re-run: {failed}).\n"
            f"Evidence {evidence_cid}. Bond {format_tokens(bond, crucible.decimals, crucible.symbol)} "
            f"from {signer.address}, returned only if the committee upholds the dispute."
        )
        confirm_or_abort("Send the dispute?", yes)
        receipt = crucible.dispute(signer, value, claim_valid=audit.rejected)
    document = {
        "submission": submission_text(value),
        "disputer": signer.address,
        "claim_valid": audit.rejected,
        "bond_wei": str(bond),
        "evidence_cid": evidence_cid,
        "failed_check": verdict.failed_check,
        "tx": receipt["transactionHash"].to_0x_hex(),
    }
    if json_output:
        emit_json(document)
    else:
        stdout.print(key_value_table("Dispute sent", list(document.items())))
