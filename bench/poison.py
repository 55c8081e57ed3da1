"""Poison against the outer step: whole demo runs (every role a separate process), side by side in one run.

For each outer-step rule (`clipped_mean`, the default, and the plain `mean`) and each trainer count, one run
with honest trainers only and one run per poison strategy in which one trainer submits poison that nobody
checks (`--unsafe-no-validation`: validators attest without looking, the extreme of a low sample rate):
`scaled-update` (x100), `poisoned-update` (sign-flipped, x20), `random-update` (random, its honest size) and
`steady-push` (one direction every round, 1.9 x its honest size, under a 2 x clip). Every run is evaluated on
the same held-out problems, so runs pair problem by problem:

- gain: the run's final checkpoint against the initial one (95 % interval);
- cost of the poison: the final checkpoint of a poisoned run against the honest run's, same rule and count;
- cost of the rule: the honest `clipped_mean` run's final checkpoint against the honest `mean` run's.

A difference whose interval holds zero is no difference. Runs differ by more than the poison: each run's
chain seeds pick other prompts, so the figures carry training noise too (say so beside them).

Run: .venv/bin/python -m bench.poison [--model tiny] [--trainers 3,5] [--rounds 3] [--prompts 64] [--rules mean]
[--poisons scaled-update] [--json]
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from typing import Any

from demo.options import DemoOptions
from demo.runner import Demo
from protocol.ml.evaluation import paired_gain

POISONS = ("scaled-update", "poisoned-update", "random-update", "steady-push")
RULES = ("clipped_mean", "mean")


def _options(args: argparse.Namespace, trainers: int, rule: str, poison: str | None) -> DemoOptions:
    return DemoOptions(
        trainers=trainers,
        validators=2,
        adversaries=[poison] if poison else [],
        model=args.model,
        rounds=args.rounds,
        prompts=args.prompts,
        eval_problems=args.eval_problems,
        settings=[f"training.aggregation.rule={rule}"],
        unsafe_no_validation=True,
        port=args.port,
    )


def _figures(before: tuple[float, ...], after: tuple[float, ...]) -> dict[str, Any]:
    gain = paired_gain(before, after)
    return {"points": round(100 * gain.mean, 1), "low": round(100 * gain.low, 1), "high": round(100 * gain.high, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2", help="a packaged model, a folder, or a made-up size (tiny)")
    parser.add_argument("--trainers", default="3", help="trainer counts, comma-separated (one poisoner in each)")
    parser.add_argument("--rounds", type=int, default=None, help="rounds (default: the demo's for the model)")
    parser.add_argument("--prompts", type=int, default=None, help="prompts a trainer answers a round")
    parser.add_argument("--eval-problems", type=int, default=500)
    parser.add_argument("--poisons", default=",".join(POISONS), help="poison strategies, comma-separated")
    parser.add_argument("--rules", default=",".join(RULES), help="outer-step rules, comma-separated")
    parser.add_argument("--port", type=int, default=8700, help="the demo's first port (away from a running demo's)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    poisons = [name for name in args.poisons.split(",") if name]
    rules = [name for name in args.rules.split(",") if name]
    finals: dict[tuple[int, str, str | None], tuple[float, ...]] = {}
    runs: list[dict[str, Any]] = []
    for trainers in (int(count) for count in args.trainers.split(",")):
        for rule in rules:
            for poison in (None, *poisons):
                started = time.perf_counter()
                with Demo(_options(args, trainers, rule, poison), lambda message: None, lambda *stage: None) as demo:
                    summary = demo.run()
                initial, final = demo.held_out["greedy"]
                finals[trainers, rule, poison] = final
                run = {
                    "trainers": trainers, "rule": rule, "poison": poison,
                    "seconds": round(time.perf_counter() - started, 1),
                    "initial_accuracy": summary["rounds"][0]["accuracy"],
                    "final_accuracy": summary["rounds"][-1]["accuracy"],
                    "gain": _figures(initial, final),
                    "poison_cost": None if poison is None else _figures(finals[trainers, rule, None], final),
                    "balanced": summary["money_check"]["balanced"],
                }  # fmt: skip
                runs.append(run)
                print(json.dumps(run), flush=True)
    rule_cost = [
        {"trainers": trainers, **_figures(finals[trainers, "mean", None], finals[trainers, "clipped_mean", None])}
        for trainers in sorted({key[0] for key in finals})
        if (trainers, "mean", None) in finals and (trainers, "clipped_mean", None) in finals
    ]
    document = {
        "machine": f"{platform.machine()}, {platform.processor() or 'cpu'}",
        "model": args.model,
        "runs": runs,
        "honest_clipped_against_mean": rule_cost,
    }
    print(json.dumps(document, indent=None if args.json else 2))


if __name__ == "__main__":
    main()
