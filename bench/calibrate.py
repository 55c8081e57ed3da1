"""Calibration of the validator's thresholds: every check's figure on honest work (across seeds, both
environments, and trainers that differ from the validator in thread count and batch sizes) and on
each adversary's work, side by side in one run. Figures and the chosen thresholds: docs/verification.md.

Run: .venv/bin/python -m bench.calibrate [--seeds 34] [--adversary-seeds 20] > calibration.json
     .venv/bin/python -m bench.calibrate --model smollm2 [--seeds 34] [--adversary-seeds 4] > smollm2.json

With --model, a real model (SmolLM2-135M-Instruct, or a folder) on the real-model demo's task
(reasoning-gym chain_sum, LoRA updates) replaces the two made-up environments.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from typing import Any

import torch
from eth_utils import keccak

from bench.node import warm_model
from demo.options import DemoOptions
from node.adversary import adversary_of
from node.work import RoundWork, produce_work
from protocol.artifacts.cid import cid_of_bytes
from protocol.ml.envs.spec import EnvSpec, default_spec
from protocol.ml.importing import model_folder
from protocol.ml.model import LoadedModel, load_folder
from protocol.work.checks import check_rewards, check_sampling, check_toploc, run_prefill
from protocol.work.round import RoundContext, assigned_slots
from protocol.work.update_checks import check_update

NODES = [
    "0x70997970C51812dc3A010C7d01b50e0d17dc79C8",
    "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC",
    "0x90F79bf6EB2c4f870365E785982E1f101E93b906",
]
# (name, the trainer's generation batch, its training micro-batch, its thread count): the validator
# always checks with one batch of 64 and every core.
HONEST_VARIANTS = [("same", 64, 64, 0), ("batch1-threads1", 1, 64, 1), ("batch5-micro3-threads1", 5, 3, 1)]
ADVERSARIES = ["wrong-model", "low-precision", "forged-tokens", "cherry-pick", "inflated-rewards", "garbage-update"]


def calibration_spec(environment: str) -> EnvSpec:
    """The spec the calibration runs: 4 prompts x 4 samples, answers up to 12 tokens."""
    spec = default_spec(environment)
    spec.training.prompts_per_round, spec.training.group_size = 4, 4
    spec.sampling.max_new_tokens = 12
    return spec


def real_model(model: str) -> tuple[LoadedModel, EnvSpec]:
    """A real model and the real-model demo's spec, at the calibration's size (4 prompts x 4 samples)."""
    options = DemoOptions(model=model, prompts=4)
    options.check()
    spec = options.spec()
    spec.training.group_size = 4
    folder = model_folder(model)
    return load_folder(folder), spec


def context_of(seed: int, environment: str) -> RoundContext:
    return RoundContext(
        chain_id=31337,
        market="0x9fE46736679d2D9a65F0992F2272dE9f3c7fa6e0",
        task_id=1 + seed % 7,
        round_index=seed,
        node=NODES[seed % len(NODES)],
        work_seed=keccak(f"calibration-{environment}-{seed}".encode()),
        checkpoint_cid=cid_of_bytes(b"checkpoint"),
        env_cid=cid_of_bytes(environment.encode()),
        base_round=seed,
    )


def figures(
    loaded: LoadedModel,
    spec: EnvSpec,
    context: RoundContext,
    adversary: str | None,
    batch: int = 64,
    micro: int = 64,
    threads: int = 0,
    honest: RoundWork | None = None,
) -> dict[str, Any]:
    """Every check's figure for one submission (all checks run, none stops the others); with the
    honest work of the same slot, whether the cheat changed anything at all."""
    all_threads = torch.get_num_threads()
    trainer_spec = spec.model_copy(deep=True)
    trainer_spec.training.micro_batch_size = micro
    torch.set_num_threads(threads or all_threads)
    try:
        work = produce_work(loaded, trainer_spec, context, batch, adversary=adversary_of(adversary))
    finally:
        torch.set_num_threads(all_threads)
    rollouts = work.rollouts
    passes = run_prefill(rollouts, loaded)
    toploc = check_toploc(rollouts, passes, spec)
    sampling = check_sampling(rollouts, passes, spec)
    update = check_update(rollouts, work.update, loaded, spec, context)
    reward_check = check_rewards(rollouts, assigned_slots(spec, context), spec, loaded)
    changed = None
    if honest is not None:
        changed = honest.rollouts != rollouts or any(
            not torch.equal(honest.update[name], work.update[name]) for name in honest.update
        )
    return {
        "changed": changed,
        "exp_mismatches": toploc.figures["max_exp_mismatches"],
        "mantissa_err_mean": toploc.figures["max_mantissa_err_mean"],
        "mantissa_err_median": toploc.figures["max_mantissa_err_median"],
        "sampling_mismatches": sampling.figures["mismatches"],
        "sampling_far_mismatches": sampling.figures["mismatches"] - sampling.figures["near_ties"],
        "sampling_largest_margin": sampling.figures["largest_margin"],
        "wrong_rewards": reward_check.figures["wrong"],
        "update_error": update.figures["max_relative_error"],
        "passes": {
            "rewards": reward_check.passed,
            "toploc": toploc.passed,
            "sampling": sampling.passed,
            "update": update.passed,
        },
    }


FIGURES = [
    "exp_mismatches",
    "mantissa_err_mean",
    "mantissa_err_median",
    "sampling_mismatches",
    "sampling_far_mismatches",
    "sampling_largest_margin",
    "wrong_rewards",
    "update_error",
]


def _number(value: Any) -> float:
    return float("inf") if isinstance(value, str) else float(value)


def report(rows: list[dict[str, Any]]) -> str:
    """Markdown tables of a calibration run: figures (min / max) per group, then detection rates."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in rows:
        kind = f"honest, {row['variant']}" if row["kind"] == "honest" else row["kind"]
        groups.setdefault((row["env"], kind), []).append(row)
    lines = []
    for (environment, kind), group in sorted(groups.items(), key=lambda item: (item[0][0], "honest" not in item[0][1])):
        cells = []
        for name in FIGURES:
            values = [_number(r[name]) for r in group]
            cells.append(f"{min(values):.3g} / {max(values):.3g}")
        lines.append(f"| {environment} | {kind} | {len(group)} | " + " | ".join(cells) + " |")
    rates = ["| work | submissions | rejected | changed anything | rejected of those changed | first check failing |",
             "|---|---|---|---|---|---|"]  # fmt: skip
    for kind in sorted({r["kind"] for r in rows}, key=lambda k: (k != "honest", k)):
        group = [r for r in rows if r["kind"] == kind]
        rejected = [r for r in group if not all(r["passes"].values())]
        changed = [r for r in group if r.get("changed") is not False]
        caught = [r for r in changed if not all(r["passes"].values())]
        first = sorted({next(c for c in ("rewards", "toploc", "sampling", "update") if not r["passes"][c])
                        for r in rejected})  # fmt: skip
        rates.append(f"| {kind} | {len(group)} | {len(rejected)} | {len(changed) if kind != 'honest' else '—'} | "
                     f"{len(caught) if kind != 'honest' else '—'} | {', '.join(first) or '—'} |")  # fmt: skip
    return "\n".join(lines) + "\n\n" + "\n".join(rates)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--report", help="Print the markdown tables of an earlier run's JSON instead.")
    parser.add_argument("--seeds", type=int, default=34, help="Honest seeds per environment and variant.")
    parser.add_argument("--adversary-seeds", type=int, default=20, help="Seeds per environment and adversary.")
    parser.add_argument("--warmup-steps", type=int, default=300)
    parser.add_argument("--model", help="A real model (smollm2 or a folder) on the real-model demo's task.")
    arguments = parser.parse_args()
    if arguments.report:
        with open(arguments.report) as handle:
            print(report(json.load(handle)["rows"]))
        return
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads", file=sys.stderr)  # fmt: skip
    rows: list[dict[str, Any]] = []
    started = time.perf_counter()
    setups = (
        [real_model(arguments.model)]
        if arguments.model
        else [
            (warm_model("tiny", arguments.warmup_steps, calibration_spec(name)), calibration_spec(name))
            for name in ("arithmetic", "sorting")
        ]
    )
    for loaded, spec in setups:
        environment = spec.environment
        for name, batch, micro, threads in HONEST_VARIANTS:
            for seed in range(arguments.seeds):
                row = figures(loaded, spec, context_of(seed, environment), None, batch, micro, threads)
                rows.append({"env": environment, "kind": "honest", "variant": name, "seed": seed, **row})
            print(f"{environment} honest {name}: done at {time.perf_counter() - started:.0f} s", file=sys.stderr)
        honest_work = [produce_work(loaded, spec, context_of(1000 + seed, environment))
                       for seed in range(arguments.adversary_seeds)]  # fmt: skip
        for adversary in ADVERSARIES:
            for seed in range(arguments.adversary_seeds):
                context = context_of(1000 + seed, environment)
                row = figures(loaded, spec, context, adversary, honest=honest_work[seed])
                rows.append({"env": environment, "kind": adversary, "variant": "", "seed": seed, **row})
            print(f"{environment} {adversary}: done at {time.perf_counter() - started:.0f} s", file=sys.stderr)
    json.dump({"spec_defaults": default_spec("arithmetic").model_dump(include={"toploc", "verification"}),
               "rows": rows}, sys.stdout)  # fmt: skip


if __name__ == "__main__":
    main()
