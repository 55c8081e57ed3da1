"""Trainer-node figures: rollout tokens per second, what TOPLOC proofs add, proof bytes per token,
and held-out accuracy over rounds of a real task on a private Anvil (3 trainers, outer aggregation).

Run: .venv/bin/python -m bench.node [--rounds 4] [--size tiny]   (figures go to docs/benchmarks.md)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path

import torch

from node.work import produce_work
from protocol.accounts import load_signer
from protocol.artifacts.manifest import load_state_dict, own_tensors, save_hf_model, save_state_dict
from protocol.artifacts.store import LocalStore
from protocol.chain import devnet
from protocol.chain.client import Crucible, Role
from protocol.chain.connection import Chain
from protocol.chain.deployment import DEVNET_UNBONDING_S, deploy
from protocol.chain.params import demo_task_params
from protocol.config import devnet_settings
from protocol.ml.aggregation import aggregate
from protocol.ml.envs.spec import EnvSpec, default_spec
from protocol.ml.evaluation import evaluate
from protocol.ml.generation import generate
from protocol.ml.model import LoadedModel, create_model, load_checkpoint, parameter_count
from protocol.ml.proofs import build_proofs
from protocol.ml.seeds import label_seed
from protocol.ml.tokenizer import CharTokenizer, prompt_ids
from protocol.ml.training import supervised_warmup
from protocol.work.round import RoundContext

TOKEN = 10**18


def warm_model(size: str, steps: int, spec: EnvSpec) -> LoadedModel:
    tokenizer = CharTokenizer()
    model = create_model(size, tokenizer, seed=0)
    supervised_warmup(model, tokenizer, spec.env(), steps, seed=0)
    return LoadedModel(model.eval(), tokenizer, None)


def generation_figures(loaded: LoadedModel, batch: int, new_tokens: int) -> dict[str, float]:
    """Tokens per second of seeded generation, and proof building time as a share of it."""
    spec = default_spec("arithmetic")
    spec.sampling.max_new_tokens = new_tokens
    problems = spec.env().problems(label_seed("bench"), batch)
    prompts = [prompt_ids(loaded.tokenizer, p) for p in problems]
    seeds = [label_seed("bench", str(i)) for i in range(batch)]
    # No end token: every completion runs the full length, so tokens per second is per decode step.
    settings = spec.sampling.model_copy(update={"temperature": 1.0})
    generate(loaded.model, prompts[:2], seeds[:2], settings, -1, 0)  # warm up kernels
    started = time.perf_counter()
    outputs = generate(loaded.model, prompts, seeds, settings, -1, 0, batch_size=batch)
    generate_s = time.perf_counter() - started
    started = time.perf_counter()
    proofs = [build_proofs(out.activations, spec.toploc) for out in outputs]
    prove_s = time.perf_counter() - started
    tokens = sum(len(out.completion_ids) for out in outputs)
    proof_bytes = sum(len(p) for group in proofs for p in group)
    return {
        "batch": batch,
        "tokens": tokens,
        "tokens_per_s": round(tokens / generate_s, 1),
        "proof_overhead_pct": round(100 * prove_s / generate_s, 2),
        "proof_bytes_per_token": round(proof_bytes / tokens, 2),
        "proof_bytes_per_32_tokens": round(32 * proof_bytes / tokens, 1),
    }


def accuracy_curve(size: str, warmup_steps: int, rounds: int, trainers: int) -> list[dict[str, float]]:
    """Rounds of a real task on a private Anvil: trainers' work submitted on chain, one aggregator
    proposing C + mean(Δ) (no validation here: every submission is honest), held-out accuracy after each."""
    spec = default_spec("arithmetic")
    spec.training.prompts_per_round, spec.training.group_size = 32, 8
    with tempfile.TemporaryDirectory(prefix="crucible-bench-") as tmp:
        store = LocalStore(Path(tmp) / "store")
        anvil = devnet.start_private_chain(Path(tmp) / "anvil.log")
        try:
            chain = Chain(anvil.rpc_url)
            settings = devnet_settings()
            creator = load_signer("dev0")
            deployment = deploy(
                chain, creator, token_holders=settings.dev_addresses, unbonding_period_s=DEVNET_UNBONDING_S
            )
            crucible = Crucible(chain, deployment)
            loaded = warm_model(size, warmup_steps, spec)
            checkpoint_cid = save_hf_model(loaded.model, store)
            env_cid = store.put(spec.canonical_bytes())
            params = demo_task_params(rounds=rounds, validators_per_check=1, sample_rate_ppm=1_000_000)
            task_id = crucible.create_task(creator, params, checkpoint_cid, env_cid)
            nodes = [load_signer(f"dev{i}") for i in range(1, trainers + 1)]
            aggregator = load_signer("dev9")
            for signer in nodes:
                crucible.stake(signer, 600 * TOKEN * rounds, Role.TRAINER)
            crucible.stake(aggregator, 200 * TOKEN, Role.VALIDATOR)
            crucible.join_task(aggregator, task_id)
            curve = [{"round": -1, **_figures(load_checkpoint(checkpoint_cid, store), spec)}]
            for round_index in range(rounds):
                loaded = load_checkpoint(crucible.checkpoint_cid(task_id, round_index), store)
                state = crucible.round(task_id, round_index)
                updates = []
                rewards = []
                for signer in nodes:
                    context = RoundContext(chain.chain_id, deployment.TaskMarket, task_id, round_index, signer.address,
                                           state.work_seed, loaded.checkpoint_cid or "", env_cid,
                                           round_index)  # fmt: skip
                    work = produce_work(loaded, spec, context)
                    rollout_cid = store.put(work.rollouts.to_bytes())
                    update_cid = save_state_dict(work.update, store, "update", parent=loaded.checkpoint_cid)
                    sid = crucible.submit_work(signer, task_id, round_index, rollout_cid, update_cid,
                                               work.rollouts.work_units, work.rollouts.proofs_digest())  # fmt: skip
                    updates.append((sid, load_state_dict(update_cid, store)))
                    rewards += [s.reward for s in work.rollouts.samples]
                deadlines = crucible.deadlines(task_id, round_index)
                devnet.warp_to(chain, deadlines.validate)
                outer = aggregate(own_tensors(loaded.model), updates, spec.training).state
                loaded.model.load_state_dict(outer)
                next_cid = save_hf_model(loaded.model, store, parent=loaded.checkpoint_cid)
                crucible.propose_checkpoint(aggregator, task_id, round_index, next_cid)
                devnet.warp_to(chain, deadlines.challenge)
                crucible.finalise_round(creator, task_id)
                figures = _figures(load_checkpoint(next_cid, store), spec)
                curve.append(
                    {"round": round_index, "train_mean_reward": round(sum(rewards) / len(rewards), 4), **figures}
                )
                print(json.dumps(curve[-1]), flush=True)
            return curve
        finally:
            anvil.stop()


def _figures(loaded: LoadedModel, spec: EnvSpec) -> dict[str, float]:
    result = evaluate(loaded.model, loaded.tokenizer, spec, 400)
    return {"accuracy": result.accuracy, "sampled_accuracy": result.sampled_accuracy}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--size", default="tiny")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--trainers", type=int, default=3)
    parser.add_argument("--warmup-steps", type=int, default=400)
    parser.add_argument("--new-tokens", type=int, default=128)
    arguments = parser.parse_args()
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads")  # fmt: skip
    spec = default_spec("arithmetic")
    for size in ("tiny", "small"):
        loaded = warm_model(size, 0, spec)
        print(f"{size}: {parameter_count(loaded.model):,} parameters")
        for batch in (1, 8, 32):
            print(json.dumps({"size": size, **generation_figures(loaded, batch, arguments.new_tokens)}), flush=True)
    curve = accuracy_curve(arguments.size, arguments.warmup_steps, arguments.rounds, arguments.trainers)
    print(json.dumps({"curve": curve}))


if __name__ == "__main__":
    main()
