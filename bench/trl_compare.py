"""Crucible side by side with TRL's GRPOTrainer on one machine, in one run: the same model
(SmolLM2-135M-Instruct with LoRA r8/alpha16 on q_proj, v_proj), environment (the demo's reasoning-gym
chain_sum task), training prompts (the ones Crucible's nodes are assigned, in the same order),
completions per prompt, completion length, temperature, learning rate and number of samples, and the
same held-out evaluation (the same problems and sampling seeds, paired before/after, 95 % intervals).

- TRL: `GRPOTrainer` on the CPU, a generation batch of one Crucible node's round (prompts x group)
  cut into optimizer steps of Crucible's minibatch size;
- Crucible, one node: the trainer's own `produce_work` and the validators' `aggregate` in one process,
  round after round (no chain), 3x the rounds so the samples match;
- Crucible, three nodes with validators: `crucible demo --no-adversary` (a devnet, every role a
  separate process, every submission checked by two validators).

Writes the held-out curves' end points as an SVG beside docs/benchmarks.md.

Run: .venv/bin/python -m bench.trl_compare [--rounds 3] [--prompts 16] [--eval-problems 500] [--json]
"""

from __future__ import annotations

import argparse
import copy
import json
import platform
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any

from bench.rl_curve import curve
from demo.options import DemoOptions
from explorer.charts import line_chart
from protocol.artifacts.cid import cid_of_bytes
from protocol.ml.envs.spec import EnvSpec
from protocol.ml.evaluation import Evaluation, evaluate, paired_gain
from protocol.ml.importing import packaged_model_folder
from protocol.ml.model import LoadedModel, load_folder
from protocol.work.round import RoundContext, assigned_slots

PLOT = Path(__file__).resolve().parent.parent / "docs" / "trl_compare.svg"
CRUCIBLE = str(Path(sys.executable).parent / "crucible")


def _figures(before: Evaluation, after: Evaluation, samples: int, seconds: float) -> dict[str, Any]:
    greedy = paired_gain(before.greedy_rewards, after.greedy_rewards)
    sampled = paired_gain(before.sampled_rewards, after.sampled_rewards)
    return {
        "samples": samples,
        "seconds": round(seconds, 1),
        "seconds_per_sample": round(seconds / samples, 3),
        "greedy": [before.accuracy, after.accuracy],
        "sampled": [before.sampled_accuracy, after.sampled_accuracy],
        "greedy_gain": greedy.as_json(),
        "sampled_gain": sampled.as_json(),
    }


def trl_run(base: LoadedModel, spec: EnvSpec, prompts: list[Any], steps: int) -> tuple[Any, float]:
    """TRL's GRPOTrainer over `prompts` (Problems, in order, each once): returns the merged model."""
    from datasets import Dataset
    from peft import LoraConfig
    from trl import GRPOConfig, GRPOTrainer

    environment = spec.env()
    training, adapter = spec.training, spec.training.adapter
    rows = [{"prompt": problem.messages(), "index": problem.index, "question": problem.prompt} for problem in prompts]
    by_index = {problem.index: problem for problem in prompts}

    def reward(completions: list[Any], index: list[int], **_: Any) -> list[float]:
        texts = [c[-1]["content"] if isinstance(c, list) else str(c) for c in completions]
        return [environment.reward(by_index[i], text) for i, text in zip(index, texts, strict=True)]

    config = GRPOConfig(
        output_dir="/tmp/crucible-trl",
        use_cpu=True,
        bf16=False,
        learning_rate=training.learning_rate,
        per_device_train_batch_size=training.minibatch_size,
        steps_per_generation=training.prompts_per_round * training.group_size // training.minibatch_size,
        num_generations=training.group_size,
        max_completion_length=spec.sampling.max_new_tokens,
        temperature=spec.sampling.temperature,
        top_k=spec.sampling.top_k,
        top_p=spec.sampling.top_p,
        loss_type="dapo",  # Crucible's loss: summed over the minibatch's tokens, over their count
        scale_rewards="group",  # Crucible's advantages: over the group's standard deviation
        lr_scheduler_type="constant",  # Crucible: a constant rate, no warm-up
        max_grad_norm=0.0,  # Crucible clips no gradient
        gradient_checkpointing=False,  # TRL's default recomputes activations; Crucible keeps them
        beta=training.kl_weight,
        epsilon=training.clip_epsilon,
        num_iterations=training.inner_steps,
        max_steps=steps,
        shuffle_dataset=False,
        report_to="none",
        logging_steps=1000,
        save_strategy="no",
        seed=0,
        disable_tqdm=True,
    )
    peft = LoraConfig(r=adapter.rank, lora_alpha=adapter.alpha, target_modules=list(adapter.target_modules),
                      lora_dropout=0.0, bias="none", task_type="CAUSAL_LM")  # fmt: skip
    model = copy.deepcopy(base.model).train()
    tokenizer = base.tokenizer._inner  # type: ignore[attr-defined]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = GRPOTrainer(model=model, reward_funcs=[reward], args=config, train_dataset=Dataset.from_list(rows),
                              processing_class=tokenizer, peft_config=peft)  # fmt: skip
        started = time.perf_counter()
        trainer.train()
        seconds = time.perf_counter() - started
    merged = trainer.model.merge_and_unload().eval()
    return merged, seconds


def crucible_prompts(spec: EnvSpec, rounds: int, nodes: int) -> list[Any]:
    """The problems Crucible's `curve` assigns, round by round and node by node (its contexts)."""
    problems = []
    for round_index in range(rounds):
        for node in range(nodes):
            context = RoundContext(31337, "0x" + "00" * 20, 1, round_index, "0x" + f"{node + 1:040x}",
                                   round_index.to_bytes(32, "big"), cid_of_bytes(b"c"), cid_of_bytes(b"e"),
                                   round_index)  # fmt: skip
            problems += [slot.problem for slot in assigned_slots(spec, context) if slot.sample_index == 0]
    return problems


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="Rounds of the three-node run (one node: 3x).")
    parser.add_argument("--prompts", type=int, default=16, help="Prompts a node answers per round.")
    parser.add_argument("--eval-problems", type=int, default=500)
    parser.add_argument("--skip-demo", action="store_true", help="Leave out the three-node devnet run.")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    options = DemoOptions(prompts=args.prompts, eval_problems=args.eval_problems)
    options.check()
    spec = options.spec()
    spec.eval_size = args.eval_problems
    base = load_folder(packaged_model_folder("smollm2"))
    per_round = spec.training.prompts_per_round * spec.training.group_size
    samples = 3 * args.rounds * per_round
    results: dict[str, Any] = {}

    started = time.perf_counter()
    initial = evaluate(base.model, base.tokenizer, spec)
    seconds = time.perf_counter() - started
    print(f"initial: greedy {initial.accuracy:.3f}, sampled {initial.sampled_accuracy:.3f} "
          f"({initial.problems} problems, {seconds:.0f} s)", file=sys.stderr, flush=True)  # fmt: skip

    # TRL: the one-node run's prompts, in its order.
    prompts = crucible_prompts(spec, 3 * args.rounds, 1)
    model, seconds = trl_run(base, spec, prompts, samples // spec.training.minibatch_size)
    trained = evaluate(model, base.tokenizer, spec)
    results["TRL GRPOTrainer"] = _figures(initial, trained, samples, seconds)
    print(f"TRL: {results['TRL GRPOTrainer']}", file=sys.stderr, flush=True)
    del model

    # Crucible, one node, in one process.
    started = time.perf_counter()
    points = curve(base, spec, 1, 3 * args.rounds, lambda index, point: None, ends_only=True)
    seconds = time.perf_counter() - started - sum(p.get("eval_s", 0.0) for p in points)
    last = points[-1]
    after = Evaluation(last["accuracy"], last["mean_reward"], last["sampled_accuracy"], last["sampled_mean_reward"],
                       initial.problems, last["greedy_rewards"], last["sampled_rewards"])  # fmt: skip
    results["Crucible, 1 node"] = _figures(initial, after, samples, seconds)
    print(f"Crucible, 1 node: {results['Crucible, 1 node']}", file=sys.stderr, flush=True)

    if not args.skip_demo:
        name = "Crucible, 3 nodes + 2 validators (devnet)"
        results[name] = demo_row(args, samples)
        print(f"{name}: {results[name]}", file=sys.stderr, flush=True)

    series = {name: [r["greedy"][0], r["greedy"][1]] for name, r in results.items()}
    PLOT.write_text(line_chart("Held-out greedy accuracy before and after, equal samples", ["before", "after"],
                               series) + "\n")  # fmt: skip
    document = {
        "machine": f"{platform.machine()}, python {platform.python_version()}",
        "rounds": args.rounds,
        "prompts": args.prompts,
        "group_size": spec.training.group_size,
        "eval_problems": initial.problems,
        "results": results,
        "plot": str(PLOT),
    }
    if args.json:
        print(json.dumps(document, indent=2))
    else:
        for name, r in results.items():
            print(
                f"{name}: {r['samples']} samples, {r['seconds_per_sample']} s/sample, "
                f"greedy {_change(r['greedy'], r['greedy_gain'])}, sampled {_change(r['sampled'], r['sampled_gain'])}"
            )


def demo_row(args: argparse.Namespace, samples: int) -> dict[str, Any]:
    """`crucible demo --no-adversary` at the bench's size: three trainer processes, two validators, a devnet."""
    started = time.perf_counter()
    done = subprocess.run(
        [CRUCIBLE, "demo", "--no-adversary", "--rounds", str(args.rounds), "--prompts", str(args.prompts),
         "--eval-problems", str(args.eval_problems), "--eval-sampled", "--json"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    seconds = time.perf_counter() - started
    summary = json.loads(done.stdout)
    first, final = summary["rounds"][0], summary["rounds"][-1]
    return {
        "samples": samples,
        "seconds": round(seconds, 1),
        "seconds_per_sample": round(seconds / samples, 3),
        "greedy": [first["accuracy"], final["accuracy"]],
        "sampled": [first["sampled_accuracy"], final["sampled_accuracy"]],
        "greedy_gain": summary["gain"]["greedy"],
        "sampled_gain": summary["gain"]["sampled"],
        "note": "wall time includes the devnet, five processes and the two evaluations",
    }


def _change(ends: list[float], gain: dict[str, Any]) -> str:
    return f"{ends[0]:.3f} → {ends[1]:.3f} ({gain['mean']:+.3f} [{gain['low']:+.3f}, {gain['high']:+.3f}])"


if __name__ == "__main__":
    main()
