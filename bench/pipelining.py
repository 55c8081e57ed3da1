"""Pipelined rounds side by side, in one run: the same task (model, environment, prompts and samples a
round, windows) with `maxStaleness` 0, 1 and 2, each on its own devnet with real windows: a block a
second, the clock left alone, every role a separate process that moves the rounds on itself (nodes and
validators fix seeds, open rounds ahead and finalise), as on a public chain.

For each run:
- each trainer's busy fraction: its compute time (fetch, generate, prove, train, publish) over its wall
  time, from its start to its exit (the tail of waiting for the last round's windows included), and over
  its working span (from its first round's start to its last submission);
- samples per hour: accepted samples over the wall time from the task's creation to its last round final,
  and the mean time between round openings;
- the staleness of every included update;
- held-out greedy accuracy of the initial model (the same checkpoint in every run), of the final
  checkpoint (equal samples: every round's accepted work, the warm-up round's included) and of the newest
  checkpoint the run had when the fastest run (staleness 2, run first) ended (equal wall time), each
  against staleness 0 on the same problems, paired, with a 95 % interval.

Round 0 is a warm-up, left out of the time figures: the processes start when the task is created, and a
node's start (imports, loading the model) takes much of a short window. The time figures run from round
1's opening to the last round's finality, over `--rounds` rounds; the learning figures count every round
from the initial model.

Every role process runs on a core of its own with one thread (a trainer on core 0, the validator on core
1 on a 2-core machine), as if on machines of their own: on shared cores, work that overlaps would slow
each other down, which separate machines do not.

Run: .venv/bin/python -m bench.pipelining [--rounds 3] [--trainers 1] [--prompts 8] [--window 50]
     [--submit-window S] [--validate-window V] [--challenge-window C] [--staleness 2,1,0] [--repeat 1]
     [--eval-problems 300] [--json]
(`--staleness` fastest first: the first run's duration is the "equal wall time" of the others; the first
staleness-0 run is the baseline of the paired comparisons, which are left out when no run has staleness 0.)
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any

from demo.options import DemoOptions
from demo.runner import Demo
from protocol.artifacts.store import LocalStore
from protocol.ml.evaluation import accuracy, held_out_rewards, paired_gain
from protocol.ml.model import load_checkpoint


def _log_events(home: Path, name: str) -> list[dict[str, Any]]:
    events = []
    for line in (home / "logs" / f"{name}.log").read_text().splitlines():
        if line.startswith("{"):
            events.append(json.loads(line))
    return events


def _trainer_figures(home: Path, name: str) -> dict[str, Any]:
    """A trainer's busy fractions, from the JSON lines of its log."""
    events = _log_events(home, name)
    finished = next(e for e in events if e["event"] == "finished")
    starts = [e["time"] for e in events if e["event"] == "round_opened"]
    sent = [e["time"] for e in events if e["event"] == "submitted"]
    span = (max(sent) - min(starts)) if starts and sent else 0.0
    opened = {e["round"]: e["time"] for e in events if e["event"] == "round_opened"}
    work = [
        round(e["time"] - opened[e["round"]], 1) for e in events if e["event"] == "prepared" and e["round"] in opened
    ]
    return {
        "round_work_s": work,  # from a round's opening (as the node saw it) to its work published
        "busy_s": finished["busy_s"],
        "wall_s": finished["wall_s"],
        "busy_fraction": finished["busy_fraction"],
        "working_span_s": round(span, 1),
        "busy_fraction_of_span": round(finished["busy_s"] / span, 4) if span else None,
        "submitted_rounds": finished["submitted_rounds"],
        "skipped_rounds": finished["skipped_rounds"],
    }


def run_one(
    staleness: int, args: argparse.Namespace, equal_time_s: float | None, cache: dict[str, tuple[float, ...]]
) -> dict[str, Any]:
    """One run; `cache` keeps held-out rewards by checkpoint CID (the initial model is the same in every run)."""
    options = DemoOptions(
        model=args.model,
        rounds=args.rounds + 1,  # round 0 is the warm-up
        trainers=args.trainers,
        validators=1,
        adversaries=[],
        prompts=args.prompts,
        eval_problems=2,  # the demo's own gain is not used here: the bench evaluates below, paired across runs
        max_staleness=staleness,
        windows_s=(
            args.submit_window or args.window,
            args.validate_window or args.window,
            args.challenge_window or args.window,
        ),
        pin_cores=True,
    )

    def say(message: str) -> None:
        print(f"[staleness {staleness}] {message}", file=sys.stderr, flush=True)

    def stage(description: str, done: int, total: int) -> None:
        print(f"[staleness {staleness}] {description}", file=sys.stderr, flush=True)

    with Demo(options, say, stage) as demo:
        summary = demo.run()
        # Rows: round 0 (the warm-up, on the initial model), rounds 1..R, then the final checkpoint; a row's
        # checkpoint is the one its round aggregates onto, so row i's exists from round i - 1's finality on.
        rows = summary["rounds"]
        start = rows[1]["opened_at"]  # the time figures start at round 1
        available = [0.0, 0.0] + [float(rows[i - 1]["finalised_at"] - start) for i in range(2, len(rows))]
        duration = available[-1]
        at_equal_time = len(rows) - 1
        if equal_time_s is not None:
            at_equal_time = max(i for i, t in enumerate(available) if t <= equal_time_s + 0.5)
        store = LocalStore(demo.home / "store")
        spec = options.spec()
        evaluated: dict[int, tuple[float, ...]] = {}
        for index in sorted({0, at_equal_time, len(rows) - 1}):
            cid = rows[index]["checkpoint_cid"]
            if cid not in cache:
                print(f"[staleness {staleness}] evaluating checkpoint {index}", file=sys.stderr, flush=True)
                loaded = load_checkpoint(cid, store)
                cache[cid] = held_out_rewards(loaded.model, loaded.tokenizer, spec, args.eval_problems, True)
            evaluated[index] = cache[cid]
        trainers = {
            a["name"]: _trainer_figures(demo.home, a["name"]) for a in summary["accounts"] if a["role"] == "trainer"
        }
        checks = [
            round(sum(e["seconds"].values()), 1)
            for a in summary["accounts"]
            if a["role"] == "validator"
            for e in _log_events(demo.home, a["name"])
            if e["event"] == "checked"
        ]
        opened = [row["opened_at"] for row in rows[1:-1]]
        warm_up = [u for u in rows[0]["updates"] if u["included"]]
    updates = [u for row in rows[1:] for u in row["updates"]]
    accepted = sum(u["included"] for u in updates) * args.prompts * spec.training.group_size
    return {
        "max_staleness": staleness,
        "duration_s": duration,
        "accepted_samples": accepted,
        "samples_per_hour": round(accepted * 3600 / duration, 1),
        "samples_per_round": args.trainers * args.prompts * spec.training.group_size,
        "mean_round_period_s": round((opened[-1] - opened[0]) / (len(opened) - 1), 1) if len(opened) > 1 else None,
        "staleness_of_included": sorted(u["staleness"] for u in updates if u["included"]),
        "warm_up_updates_included": len(warm_up),
        "trained_samples": (len(warm_up) * args.prompts * spec.training.group_size) + accepted,
        "initial_cid": rows[0]["checkpoint_cid"],
        "trainers": trainers,
        "check_s": checks,
        "checkpoint_at_equal_time": at_equal_time,
        "checkpoint_available_s": available,
        "rewards": evaluated,
        "final": len(rows) - 1,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--trainers", type=int, default=1)
    parser.add_argument("--prompts", type=int, default=8, help="Prompts a trainer answers per round.")
    parser.add_argument("--window", type=int, default=50, help="Seconds of each window (submit, validate, challenge).")
    parser.add_argument("--submit-window", type=int, default=None, help="The submit window (default: --window).")
    parser.add_argument("--validate-window", type=int, default=None, help="The validate window (default: --window).")
    parser.add_argument("--challenge-window", type=int, default=None, help="The challenge window (default: --window).")
    parser.add_argument("--staleness", default="2,1,0", help="maxStaleness of the runs, fastest first.")
    parser.add_argument("--repeat", type=int, default=1, help="Runs of each setting (the chain's seeds differ).")
    parser.add_argument("--eval-problems", type=int, default=300)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    started = time.time()
    runs: list[dict[str, Any]] = []
    cache: dict[str, tuple[float, ...]] = {}
    for repeat in range(args.repeat):
        for staleness in (int(value) for value in args.staleness.split(",")):
            runs.append(run_one(staleness, args, runs[0]["duration_s"] if runs else None, cache) | {"repeat": repeat})
    if len({run["initial_cid"] for run in runs}) != 1:
        raise SystemExit("the runs did not start from the same initial checkpoint: no paired comparison")
    # The comparisons are with the first sequential run; without one (no 0 in --staleness) they are left out.
    base = next((run for run in runs if run["max_staleness"] == 0), None)
    table = []
    for run in sorted(runs, key=lambda r: (r["max_staleness"], r["repeat"])):
        initial = run["rewards"][0]
        final = run["rewards"][run["final"]]
        at_time = run["rewards"][run["checkpoint_at_equal_time"]]
        busy = [t["busy_fraction"] for t in run["trainers"].values()]
        busy_span = [t["busy_fraction_of_span"] for t in run["trainers"].values()]
        table.append(
            {
                "max_staleness": run["max_staleness"],
                "repeat": run["repeat"],
                "duration_s": run["duration_s"],
                "accepted_samples": run["accepted_samples"],
                "samples_per_hour": run["samples_per_hour"],
                "samples_per_hour_vs_staleness_0": (
                    round(run["samples_per_hour"] / base["samples_per_hour"], 2)
                    if base and base["samples_per_hour"]
                    else None
                ),
                "mean_round_period_s": run["mean_round_period_s"],
                # A long task's rate: a round's samples every round period (the tail of the last round's
                # windows amortised away).
                "steady_samples_per_hour": (
                    round(run["samples_per_round"] * 3600 / period, 1)
                    if (period := run["mean_round_period_s"])
                    else None
                ),
                "steady_vs_staleness_0": (
                    round(base["mean_round_period_s"] / period, 2)
                    if base and period and base["mean_round_period_s"]
                    else None
                ),
                "busy_fraction": busy,
                "busy_fraction_of_working_span": busy_span,
                "staleness_of_included": run["staleness_of_included"],
                "warm_up_updates_included": run["warm_up_updates_included"],
                "trained_samples": run["trained_samples"],
                "busy_s": [t["busy_s"] for t in run["trainers"].values()],
                "round_work_s": [t["round_work_s"] for t in run["trainers"].values()],
                "check_s": run["check_s"],
                "working_span_s": [t["working_span_s"] for t in run["trainers"].values()],
                "skipped_rounds": {name: t["skipped_rounds"] for name, t in run["trainers"].items()},
                "accuracy_initial": accuracy(initial),
                "accuracy_final": accuracy(final),
                "gain_over_initial": paired_gain(initial, final).as_json(),
                "final_vs_staleness_0": paired_gain(base["rewards"][base["final"]], final).as_json() if base else None,
                "checkpoint_at_equal_time": run["checkpoint_at_equal_time"],
                "accuracy_at_equal_time": accuracy(at_time),
                "equal_time_vs_staleness_0": (
                    paired_gain(base["rewards"][base["checkpoint_at_equal_time"]], at_time).as_json() if base else None
                ),
            }
        )
    result = {
        "machine": f"{platform.machine()}, {platform.processor() or 'cpu'}, {__import__('os').cpu_count()} cores",
        "command": "python -m bench.pipelining "
        + " ".join(f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items() if k != "json"),
        "equal_wall_time_s": runs[0]["duration_s"],
        "seconds": round(time.time() - started),
        "runs": table,
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return
    for row in table:
        versus = row["final_vs_staleness_0"]
        print(
            f"staleness {row['max_staleness']}: {row['samples_per_hour']:.0f} samples/h "
            f"({row['samples_per_hour_vs_staleness_0']}x), busy {row['busy_fraction']} "
            f"(of working span {row['busy_fraction_of_working_span']}), final accuracy "
            f"{100 * row['accuracy_final']:.1f}%"
            + (
                f" vs staleness 0 {100 * versus['mean']:+.1f} [{100 * versus['low']:+.1f}, {100 * versus['high']:+.1f}]"
                if versus
                else ""
            )
        )


if __name__ == "__main__":
    main()
