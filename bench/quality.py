"""Training quality of whole demo runs (every role a separate process), side by side in one run:

- decentralised: 3 honest trainer nodes, the validators' outer aggregation of their updates;
- alone: 1 trainer node answering 3x the prompts a round (the same total rollouts), in minibatches
  of the default size (3x the optimizer steps) and of 3x that size (the same steps, as a data-parallel
  run of the three nodes would take);
- poisoned, validation on: 2 honest nodes and a `poisoned-update` node, honest validators;
- poisoned, validation off: the same with `--unsafe-no-validation` (validators attest unchecked).

Reports the held-out accuracy (greedy and sampled) of every checkpoint of each run and the mean
reward of each round's accepted rollouts, and writes the sampled-accuracy curves as an SVG next to
docs/benchmarks.md. `--prompts` is per node of the decentralised runs; the lone node answers 3x as
many, so at most 170 with groups of 8 (a rollout file holds at most 4,096 completions).

Run: .venv/bin/python -m bench.quality [--rounds 5] [--prompts 128] [--warmup-steps 600] [--json]
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path
from typing import Any

from demo.options import DemoOptions
from demo.runner import Demo
from explorer.charts import line_chart
from protocol.ml.envs.spec import TrainingSettings

PLOT = Path(__file__).resolve().parent.parent / "docs" / "quality.svg"


def configurations(rounds: int, prompts: int, warmup: int) -> dict[str, DemoOptions]:
    common: dict[str, Any] = {
        "rounds": rounds, "validators": 2, "warmup_steps": warmup, "model": "tiny", "eval_every_round": True,
        "eval_problems": 200, "eval_sampled": True,
    }  # fmt: skip
    default_minibatch = TrainingSettings().minibatch_size
    return {
        "decentralised (3 nodes)": DemoOptions(trainers=3, adversaries=[], prompts=prompts, **common),
        "alone (1 node, 3x prompts)": DemoOptions(trainers=1, adversaries=[], prompts=3 * prompts, **common),
        "alone, 3x minibatch (same steps)": DemoOptions(
            trainers=1, adversaries=[], prompts=3 * prompts, minibatch=3 * default_minibatch, **common
        ),
        "poisoned, validation on": DemoOptions(trainers=3, adversaries=["poisoned-update"], prompts=prompts, **common),
        "poisoned, validation off": DemoOptions(
            trainers=3, adversaries=["poisoned-update"], prompts=prompts, unsafe_no_validation=True, **common
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--prompts", type=int, default=128)
    parser.add_argument("--warmup-steps", type=int, default=DemoOptions.warmup_steps)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results: dict[str, Any] = {}
    for name, options in configurations(args.rounds, args.prompts, args.warmup_steps).items():
        started = time.perf_counter()
        with Demo(options, lambda message: None, lambda description, done, total: None) as demo:
            summary = demo.run()
        results[name] = {
            "seconds": round(time.perf_counter() - started, 1),
            "accuracy": [r["accuracy"] for r in summary["rounds"]],
            "sampled_accuracy": [r["sampled_accuracy"] for r in summary["rounds"]],
            "rollout_reward": [r["rollout_reward"] for r in summary["rounds"]],
            "balanced": summary["money_check"]["balanced"],
            "slashed_wei": {
                a["name"]: str(int(a["stake_before_wei"]) - int(a["stake_after_wei"])) for a in summary["accounts"]
            },
        }
        print(f"{name}: {results[name]}", flush=True)
    labels = ["initial", *(f"r{i}" for i in range(1, args.rounds + 1))]
    series = {name: list(result["sampled_accuracy"]) for name, result in results.items()}
    PLOT.write_text(line_chart("Held-out sampled accuracy after each round", labels, series) + "\n")
    document = {
        "machine": f"{platform.machine()}, python {platform.python_version()}",
        "rounds": args.rounds,
        "prompts": args.prompts,
        "results": results,
        "plot": str(PLOT),
    }
    print(json.dumps(document, indent=2) if args.json else f"plot written to {PLOT}")


if __name__ == "__main__":
    main()
