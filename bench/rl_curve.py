"""The learning curve of the protocol's RL in one process, without a chain: the trainers' own
`produce_work` (generation, TOPLOC proofs, scoring, GRPO) and the validators' `aggregate`, round after
round, with the held-out evaluation of every checkpoint. It is how the demo's defaults were chosen:
several hyper-parameter settings side by side in one run, from the same warmed-up model.

Run: .venv/bin/python -m bench.rl_curve [--size tiny] [--warmup-steps 600] [--rounds 6] [--nodes 3]
     [--setting lr=3e-4,mb=32 --setting neg=1,mb=0,inner=4,prompts=8 ...] [--labels] [--json]
     [--setting enc=topk,keep=2,chunk=64,bits=2]  (compressed updates with error feedback per trainer)
     [--model smollm2|FOLDER] [--env reasoning-gym/chain_sum --set answer=last_number --set eval_size=500 ...]

With --model the warm-up is skipped (a real model starts as it is); --set changes the spec as
`crucible env spec --set` does. The last line gives the paired held-out gain (first → last checkpoint)
with its 95 % interval, greedy and sampled. Each setting reports the bytes of one trainer's update
per round (float32, or its encoding); with several settings, each one's last checkpoint is compared,
paired on the same held-out problems, with the first setting's.
"""

from __future__ import annotations

import argparse
import copy
import json
import platform
import time
from typing import Any

from node.work import produce_work
from protocol.artifacts.cid import cid_of_bytes
from protocol.artifacts.manifest import own_tensors
from protocol.ml.aggregation import aggregate
from protocol.ml.compression import compress, stored_bytes
from protocol.ml.envs.spec import spec_with_settings
from protocol.ml.evaluation import evaluate, paired_gain
from protocol.ml.importing import model_folder
from protocol.ml.model import LoadedModel, create_model, load_folder
from protocol.ml.tokenizer import DEFAULT_ALPHABET, CharTokenizer
from protocol.ml.training import answer_sequence, grpo_update, supervised_warmup
from protocol.work.round import RoundContext, assigned_slots

KEYS = {
    "lr": "learning_rate",
    "inner": "inner_steps",
    "group": "group_size",
    "outer": "outer_learning_rate",
    "prompts": "prompts_per_round",
    "mb": "minibatch_size",
    "neg": "negative_weight",
}


# The update's encoding (training.encoding): enc=topk|dense, and its keep, chunk and bits.
ENCODING_KEYS = ("enc", "keep", "chunk", "bits")


def parse_setting(text: str) -> dict[str, Any]:
    """`lr=1e-3,inner=4,enc=topk` → {"learning_rate": 0.001, "inner_steps": 4, "encoding.kind": "topk"}."""
    setting: dict[str, Any] = {}
    for part in filter(None, text.split(",")):
        key, _, value = part.partition("=")
        if key in ENCODING_KEYS:
            setting["encoding." + ("kind" if key == "enc" else key)] = value if key == "enc" else int(value)
        elif key in KEYS:
            setting[KEYS[key]] = float(value)
        else:
            raise SystemExit(f"unknown setting {key!r}: one of {', '.join((*KEYS, *ENCODING_KEYS))}")
    return setting


def chainless_context(spec: Any, node: int, round_index: int, seed: int = 0) -> RoundContext:
    """Trainer `node`'s context of round `round_index` with no chain: its work seed from `seed` and the round
    alone (seed 0: the round's index), a made-up market, and checkpoint CIDs that are labels (nothing is stored)."""
    label = f"round {round_index}" if seed == 0 else f"seed {seed} round {round_index}"
    return RoundContext(
        chain_id=31337,
        market="0x" + "00" * 20,
        task_id=1,
        round_index=round_index,
        node="0x" + f"{node + 1:040x}",
        work_seed=(seed << 64 | round_index).to_bytes(32, "big"),
        checkpoint_cid=cid_of_bytes(label.encode()),
        env_cid=cid_of_bytes(spec.canonical_bytes()),
        base_round=round_index,
    )


def labelled_update(loaded: Any, spec: Any, context: Any) -> Any:
    """The control: an update from the same prompts' right answers (advantage 1 each, one sequence a
    prompt) through the same optimizer and settings, with no rollouts: what labels would teach."""

    tokenizer = loaded.tokenizer
    problems = {slot.prompt_index: slot.problem for slot in assigned_slots(spec, context)}
    sequences = [answer_sequence(tokenizer, p) for p in problems.values()]
    return grpo_update(loaded.model, sequences, spec.training, spec.sampling.temperature, tokenizer.pad_id)


def _evaluated(loaded: LoadedModel, spec: Any) -> dict[str, Any]:
    started = time.perf_counter()
    result = evaluate(loaded.model, loaded.tokenizer, spec)
    return {
        "accuracy": result.accuracy, "sampled_accuracy": result.sampled_accuracy,
        "mean_reward": result.mean_reward, "sampled_mean_reward": result.sampled_mean_reward,
        "greedy_rewards": result.greedy_rewards, "sampled_rewards": result.sampled_rewards,
        "eval_s": round(time.perf_counter() - started, 1),
    }  # fmt: skip


def curve(
    base: Any, spec: Any, nodes: int, rounds: int, on_round: Any, labels: bool = False, ends_only: bool = False
) -> list[dict[str, Any]]:
    """Held-out accuracy of the initial checkpoint and after each round of `nodes` trainers (trained on
    the right answers instead of their rollouts with `labels`; with `ends_only`, the first and last
    checkpoints only)."""

    loaded = LoadedModel(copy.deepcopy(base.model), base.tokenizer, None)
    points = []
    residuals: dict[int, Any] = {}  # each trainer's error-feedback residual (topk)
    encoding = spec.training.encoding
    for round_index in range(rounds + 1):
        if ends_only and 0 < round_index < rounds:  # the rollouts' reward still shows the curve
            points.append({})
        else:
            points.append(_evaluated(loaded, spec))
        if round_index == rounds:
            on_round(round_index, points[-1])
            break
        updates = []
        rewards: list[float] = []
        for node in range(nodes):
            context = chainless_context(spec, node, round_index)
            if labels:
                updates.append((node, labelled_update(loaded, spec, context)))
                continue
            work = produce_work(loaded, spec, context)
            rewards += [sample.reward for sample in work.rollouts.samples]
            update = work.update
            if encoding.kind == "topk":
                update, residuals[node] = compress(work.update, residuals.get(node), encoding)
            updates.append((node, update))
            points[-1]["update_bytes"] = stored_bytes(update)
            points[-1]["dense_bytes"] = stored_bytes(work.update)
            points[-1].setdefault("work_s", []).append(round(work.generate_s + work.prove_s + work.train_s, 1))
        # The policy's mean reward on its own rollouts: thousands of completions, RL's objective.
        points[-1]["rollout_reward"] = sum(rewards) / len(rewards) if rewards else None
        on_round(round_index, points[-1])
        state = aggregate(own_tensors(loaded.model), updates, spec.training).state
        loaded.model.load_state_dict(state, strict=False)  # tied names load through their first name
    return points


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="arithmetic")
    parser.add_argument("--size", default="tiny")
    parser.add_argument("--warmup-steps", type=int, default=600)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--setting", action="append", default=None, help="e.g. lr=1e-3,inner=4,group=8,prompts=8")
    parser.add_argument(
        "--labels", action="store_true", help="Control: each setting also trained on the right answers."
    )
    parser.add_argument("--model", default=None, help="smollm2 or a model folder (no warm-up)")
    parser.add_argument("--set", dest="settings", action="append", default=[], help="a spec setting, key=value")
    parser.add_argument("--ends-only", action="store_true", help="Evaluate the first and last checkpoints only.")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    spec = spec_with_settings({"environment": args.env}, args.settings)
    environment = spec.env()
    if args.model:
        folder = model_folder(args.model)
        base = load_folder(folder)
    else:
        extra = "".join(sorted(set(environment.alphabet()) - set(DEFAULT_ALPHABET)))
        tokenizer = CharTokenizer(DEFAULT_ALPHABET + extra)
        model = create_model(args.size, tokenizer, 0)
        started = time.perf_counter()
        supervised_warmup(model, tokenizer, environment, args.warmup_steps, 0)
        print(f"warm-up {args.warmup_steps} steps: {time.perf_counter() - started:.0f} s", flush=True)
        base = LoadedModel(model, tokenizer, None)
    results = []
    runs = [(text, False) for text in args.setting or [""]]
    if args.labels:
        runs += [(text, True) for text, _ in runs]
    for text, labels in runs:
        setting = parse_setting(text)
        run_spec = spec.model_copy(deep=True)
        for key, value in setting.items():
            owner = run_spec.training.encoding if key.startswith("encoding.") else run_spec.training
            name = key.removeprefix("encoding.")
            setattr(owner, name, value if isinstance(value, str) else type(getattr(owner, name))(value))
        started = time.perf_counter()
        label = (text or "defaults") + (" (labels)" if labels else "")
        points = curve(
            base,
            run_spec,
            args.nodes,
            args.rounds,
            lambda index, point, label=label: print(f"{label} r{index}: {_shown(point)}", flush=True),
            labels,
            args.ends_only,
        )
        results.append({"setting": label, "seconds": round(time.perf_counter() - started, 1), "points": points})
    document = {
        "machine": f"{platform.machine()}, python {platform.python_version()}",
        "env": args.env,
        "size": args.size,
        "warmup_steps": args.warmup_steps,
        "nodes": args.nodes,
        "results": results,
    }
    if args.json:
        print(json.dumps(document, indent=2))
    else:
        for result in results:
            greedy = " → ".join(f"{p['accuracy']:.3f}" for p in result["points"] if p.get("accuracy") is not None)
            sampled = " → ".join(
                f"{p['sampled_accuracy']:.3f}" for p in result["points"] if p.get("accuracy") is not None
            )
            reward = " → ".join(
                f"{p['rollout_reward']:.3f}" for p in result["points"] if p.get("rollout_reward") is not None
            )
            print(f"{result['setting']} ({result['seconds']} s)\n  greedy  {greedy}\n  sampled {sampled}")
            if reward:
                print(f"  rollout reward (rounds 0..{len(result['points']) - 2}) {reward}")
            first, last = result["points"][0], result["points"][-1]
            for kind in ("greedy", "sampled"):
                gain = paired_gain(first[f"{kind}_rewards"], last[f"{kind}_rewards"])
                verdict = "a gain" if gain.real else "no gain"
                print(f"  {kind} held-out reward {gain.mean:+.3f} [{gain.low:+.3f}, {gain.high:+.3f}] ({verdict})")
            sizes = [(p["update_bytes"], p["dense_bytes"]) for p in result["points"] if "update_bytes" in p]
            if sizes:
                sent, dense = sizes[-1]
                print(f"  one trainer's update: {sent:,} bytes a round, {100 * sent / dense:.2f} % of float32")
            reference = results[0]["points"][-1]
            if result is not results[0] and reference.get("greedy_rewards") and last.get("greedy_rewards"):
                for kind in ("greedy", "sampled"):
                    gap = paired_gain(reference[f"{kind}_rewards"], last[f"{kind}_rewards"])
                    print(f"  last checkpoint against {results[0]['setting']}'s, {kind}: {gap.mean:+.3f} "
                          f"[{gap.low:+.3f}, {gap.high:+.3f}]")  # fmt: skip


def _shown(point: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in point.items() if not key.endswith("_rewards")}


if __name__ == "__main__":
    main()
