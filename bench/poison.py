"""Poison against the outer step: whole demo runs (every role a separate process), side by side in one run.

For each outer-step rule (`trimmed_mean`, the default, `clipped_mean` and the plain `mean`; `--rules`) and each
trainer count, one run with honest trainers only and one run per poison strategy in which one trainer submits
poison that nobody checks (`--unsafe-no-validation`: validators attest without looking, the extreme of a low
sample rate): `scaled-update` (x100), `poisoned-update` (sign-flipped, x20), `random-update` (random, its honest
size) and `steady-push` (one direction every round, 1.9 x its honest size, under a 2 x clip). Every run is
evaluated on the same held-out problems, so runs pair problem by problem:

- gain: the run's final checkpoint against the initial one (95 % interval);
- cost of the poison: the final checkpoint of a poisoned run against the honest run's, same rule and count;
- cost of the rule: each robust rule's honest run's final checkpoint against the honest `mean` run's.

A difference whose interval holds zero is no difference. Demo runs differ by more than the poison: each run's
chain seeds pick other prompts, so the figures carry training noise too (say so beside them).

`--in-process` runs the same task without a chain, every trainer's work (`node.work.produce_work`) and the outer
step (`protocol.ml.aggregation.aggregate`) in this process, with fixed round seeds (`--seeds`: one paired set of
runs per seed). A poisoned run then differs from its honest one by the poison alone, and the first round's
honest work, the same in every run of a seed and trainer count, is computed once.

Run: .venv/bin/python -m bench.poison [--model tiny] [--trainers 3,5] [--rounds 3] [--prompts 64] [--rules mean]
[--poisons scaled-update] [--in-process [--seeds 0,1]] [--set KEY=VALUE] [--json]
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from typing import Any

from bench.rl_curve import chainless_context
from demo.options import DEMO_REAL_ENV, REAL_DEFAULTS, REAL_MODEL_PRESET, DemoOptions
from demo.runner import Demo
from node.adversary import adversary_of
from node.work import produce_work
from protocol.artifacts.manifest import own_tensors
from protocol.ml.aggregation import aggregate
from protocol.ml.envs.presets import preset
from protocol.ml.envs.spec import spec_with_settings
from protocol.ml.evaluation import accuracy, held_out_rewards, paired_gain
from protocol.ml.importing import model_folder
from protocol.ml.model import LoadedModel, load_folder
from protocol.work.round import RoundContext

POISONS = ("scaled-update", "poisoned-update", "random-update", "steady-push")
RULES = ("trimmed_mean", "clipped_mean", "mean")


def _options(args: argparse.Namespace, trainers: int, rule: str, poison: str | None) -> DemoOptions:
    return DemoOptions(
        trainers=trainers,
        validators=2,
        adversaries=[poison] if poison else [],
        model=args.model,
        rounds=args.rounds,
        prompts=args.prompts,
        eval_problems=args.eval_problems,
        settings=[*args.settings, f"training.aggregation.rule={rule}"],
        unsafe_no_validation=True,
        port=args.port,
    )


def _figures(before: tuple[float, ...], after: tuple[float, ...]) -> dict[str, Any]:
    gain = paired_gain(before, after)
    return {"points": round(100 * gain.mean, 1), "low": round(100 * gain.low, 1), "high": round(100 * gain.high, 1)}


def _demo_final(args: argparse.Namespace, trainers: int, rule: str, poison: str | None, _: int) -> dict[str, Any]:
    """One whole demo run: its initial and final held-out greedy rewards, and whether its books balanced."""
    with Demo(_options(args, trainers, rule, poison), lambda message: None, lambda *stage: None) as demo:
        summary = demo.run()
    initial, final = demo.held_out["greedy"]
    return {"initial": initial, "final": final, "balanced": summary["money_check"]["balanced"]}


class InProcess:
    """The demo's task without a chain: `trainers` trainers' work and the outer step in this process, round seeds
    fixed by `seed`; the last trainer is the poisoner. Round 0's honest updates are kept across runs."""

    def __init__(self, args: argparse.Namespace) -> None:
        import torch

        torch.manual_seed(0)
        self.args = args
        self.rounds = args.rounds or REAL_DEFAULTS["rounds"]
        prompts = args.prompts or REAL_DEFAULTS["prompts"]
        document = preset(REAL_MODEL_PRESET).document(DEMO_REAL_ENV)
        self.settings = [f"training.prompts_per_round={prompts}", *args.settings]
        self.spec = spec_with_settings(document, self.settings)
        self.base = load_folder(model_folder(args.model))
        self.first_round: dict[tuple[int, int], list[Any]] = {}
        self.initial = held_out_rewards(self.base.model, self.base.tokenizer, self.spec, args.eval_problems, True)

    def __call__(
        self, _: argparse.Namespace, trainers: int, rule: str, poison: str | None, seed: int
    ) -> dict[str, Any]:
        import copy

        spec = spec_with_settings(self.spec.model_dump(mode="json"), [f"training.aggregation.rule={rule}"])
        loaded = LoadedModel(copy.deepcopy(self.base.model), self.base.tokenizer, None)
        adversary = adversary_of(poison)
        treated = []  # each round's notes: every update's clip factor and trimmed share
        for round_index in range(self.rounds):
            honest = self._honest_updates(loaded, spec, trainers, round_index, seed)
            updates = [(node, update) for node, (update, _) in enumerate(honest)]
            if adversary is not None:
                update, context = honest[-1]
                updates[-1] = (trainers - 1, adversary.corrupt_update(update, context))
            step = aggregate(own_tensors(loaded.model), updates, spec.training)
            loaded.model.load_state_dict(step.state, strict=False)  # tied names load through their first name
            treated.append([[round(note.scale, 3), round(note.trimmed_share, 3)] for note in step.notes or []])
        final = held_out_rewards(loaded.model, loaded.tokenizer, spec, self.args.eval_problems, True)
        return {"initial": self.initial, "final": final, "balanced": None, "outer_step": treated}

    def _honest_updates(
        self, loaded: LoadedModel, spec: Any, trainers: int, round_index: int, seed: int
    ) -> list[tuple[Any, RoundContext]]:
        """Each trainer's honest update this round, with its round context (round 0's kept across runs: the
        rule does not act before the first outer step)."""
        kept = self.first_round.get((trainers, seed)) if round_index == 0 else None
        if kept is not None:
            return kept
        found = []
        for node in range(trainers):
            context = chainless_context(spec, node, round_index, seed)
            found.append((produce_work(loaded, spec, context).update, context))
        if round_index == 0:
            self.first_round[trainers, seed] = found
        return found


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
    parser.add_argument(
        "--poison-rules",
        default=None,
        help="rules the poisons run under (default: every rule; the others run honest only, as baselines)",
    )
    parser.add_argument("--in-process", action="store_true", help="no chain, fixed round seeds (see above)")
    parser.add_argument("--seeds", default="0", help="--in-process: round-seed sets, comma-separated")
    parser.add_argument(
        "--set",
        dest="settings",
        action="append",
        default=[],
        help="a spec setting, key=value (e.g. training.aggregation.clip_multiple=1.25), for every run",
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    run_one = InProcess(args) if args.in_process else _demo_final
    seeds = [int(seed) for seed in args.seeds.split(",")] if args.in_process else [0]
    poisons = [name for name in args.poisons.split(",") if name]
    rules = [name for name in args.rules.split(",") if name]
    poison_rules = rules if args.poison_rules is None else args.poison_rules.split(",")
    finals: dict[tuple[int, int, str, str | None], tuple[float, ...]] = {}
    runs: list[dict[str, Any]] = []
    for trainers in (int(count) for count in args.trainers.split(",")):
        for seed in seeds:
            for rule in rules:
                for poison in (None, *(poisons if rule in poison_rules else ())):
                    started = time.perf_counter()
                    result = run_one(args, trainers, rule, poison, seed)
                    finals[trainers, seed, rule, poison] = final = result["final"]
                    honest = finals[trainers, seed, rule, None]
                    run = {
                        "trainers": trainers, "seed": seed, "rule": rule, "poison": poison,
                        "seconds": round(time.perf_counter() - started, 1),
                        "initial_accuracy": round(accuracy(result["initial"]), 4),
                        "final_accuracy": round(accuracy(final), 4),
                        "gain": _figures(result["initial"], final),
                        "poison_cost": None if poison is None else _figures(honest, final),
                        "balanced": result["balanced"],
                        "outer_step": result.get("outer_step"),  # [clip factor, trimmed share] per update, round
                        "final_rewards": final,  # to pair runs of other invocations (same seeds: same problems)
                    }  # fmt: skip
                    runs.append(run)
                    print(json.dumps(run), flush=True)
    rule_cost = [
        {"trainers": trainers, "seed": seed, "rule": rule, **_figures(finals[trainers, seed, "mean", None], final)}
        for (trainers, seed, rule, poison), final in finals.items()
        if poison is None and rule != "mean" and (trainers, seed, "mean", None) in finals
    ]
    document = {
        "machine": f"{platform.machine()}, {platform.processor() or 'cpu'}",
        "model": args.model,
        "runs": runs,
        "in_process": args.in_process,
        "honest_rule_against_mean": rule_cost,
    }
    print(json.dumps(document, indent=None if args.json else 2))


if __name__ == "__main__":
    main()
