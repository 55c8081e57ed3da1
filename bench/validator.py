"""Validator figures, side by side in one run: the TOPLOC + sampling check of a rollout batch against
generating it (same model, machine and run) at batch sizes 1, 8 and 32; a whole submission's check
against the trainer's work for it, and what that makes per round at a spot-check rate; the time
each check kind takes on honest and on cheating work.

Run: .venv/bin/python -m bench.validator [--new-tokens 128] [--sizes tiny,small]   (docs/benchmarks.md)

With --real-model (SmolLM2-135M-Instruct, or a folder) it measures the real-model demo's task instead: one
trainer's work for a round, and its check with each prompt prefilled once (`prefill`) beside one whole pass
per completion (`whole_prefill`), on `--threads` threads (1: a pinned role process of the pipelining bench).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from typing import Any

import torch

from bench.node import warm_model
from demo.options import DemoOptions
from node.adversary import adversary_of
from node.work import produce_work
from protocol.artifacts.cid import cid_of_bytes
from protocol.ml.envs.spec import default_spec
from protocol.ml.generation import generate
from protocol.ml.importing import model_folder
from protocol.ml.inference import prefill, whole_prefill
from protocol.ml.model import LoadedModel, load_folder, parameter_count
from protocol.ml.proofs import build_proofs, verify_proofs
from protocol.ml.sampling import _MASK32, _MULTIPLIER, _SALT, gumbel_noise, replay_many, seed_words
from protocol.ml.seeds import label_seed
from protocol.ml.tokenizer import prompt_ids
from protocol.work.checks import Artifacts, Claim, check_toploc, verify_submission
from protocol.work.round import RoundContext

CONTEXT = RoundContext(
    chain_id=31337,
    market="0x9fE46736679d2D9a65F0992F2272dE9f3c7fa6e0",
    task_id=1,
    round_index=0,
    node="0x70997970C51812dc3A010C7d01b50e0d17dc79C8",
    work_seed=label_seed("bench-validator"),
    checkpoint_cid=cid_of_bytes(b"checkpoint"),
    env_cid=cid_of_bytes(b"env"),
    base_round=0,
)


def check_against_generation(loaded: LoadedModel, batch: int, new_tokens: int) -> dict[str, Any]:
    """Generating `batch` completions of `new_tokens` (no end token) against checking them: one
    prefill pass, TOPLOC verification and the sampling replay."""
    spec = default_spec("arithmetic")
    spec.sampling.max_new_tokens = new_tokens
    problems = spec.env().problems(label_seed("bench-check"), batch)
    prompts = [prompt_ids(loaded.tokenizer, p) for p in problems]
    seeds = [label_seed("bench-check", str(i)) for i in range(batch)]
    generate(loaded.model, prompts[:1], seeds[:1], spec.sampling, -1, 0)  # warm up kernels
    started = time.perf_counter()
    outputs = generate(loaded.model, prompts, seeds, spec.sampling, -1, 0, batch_size=batch)
    generate_s = time.perf_counter() - started
    proofs = [build_proofs(out.activations, spec.toploc) for out in outputs]
    started = time.perf_counter()
    pairs = [(p, o.completion_ids) for p, o in zip(prompts, outputs, strict=True)]
    passes = prefill(loaded.model, pairs, 0, min(batch, 16))  # 16 rows a pass: the validator's micro-batch
    prefill_s = time.perf_counter() - started
    started = time.perf_counter()
    chunks = [verify_proofs(r.activations, p, spec.toploc) for r, p in zip(passes, proofs, strict=True)]
    toploc_s = time.perf_counter() - started
    started = time.perf_counter()
    replays = replay_many([r.logits for r in passes], seeds, [o.completion_ids for o in outputs], spec.sampling)
    sampling_s = time.perf_counter() - started
    assert all(f.passes(spec.toploc) for c in chunks for f in c) and not any(r.mismatches for r in replays)
    check_s = prefill_s + toploc_s + sampling_s
    return {
        "batch": batch,
        "tokens": sum(len(o.completion_ids) for o in outputs),
        "generate_s": round(generate_s, 3),
        "check_s": round(check_s, 3),
        "prefill_s": round(prefill_s, 3),
        "toploc_s": round(toploc_s, 3),
        "sampling_s": round(sampling_s, 3),
        "speedup": round(generate_s / check_s, 1),
    }


def submission_figures(loaded: LoadedModel, adversary: str | None) -> dict[str, Any]:
    """The trainer's work for one submission of the default arithmetic task, and a full check of it."""
    spec = default_spec("arithmetic")
    started = time.perf_counter()
    work = produce_work(loaded, spec, CONTEXT, adversary=adversary_of(adversary))
    trainer_s = time.perf_counter() - started
    digest = work.rollouts.proofs_digest()
    bound = CONTEXT.commitment(digest)
    claim = Claim(CONTEXT, cid_of_bytes(work.rollouts.to_bytes()), "update", work.rollouts.work_units, bound)
    started = time.perf_counter()
    verdict = verify_submission(claim, spec, loaded, Artifacts(work.rollouts.to_bytes, lambda: work.update))
    check_s = time.perf_counter() - started
    return {
        "adversary": adversary,
        "valid": verdict.valid,
        "failed_check": verdict.failed_check,
        "trainer_s": round(trainer_s, 3),
        "generate_s": round(work.generate_s, 3),
        "prove_s": round(work.prove_s, 3),
        "train_s": round(work.train_s, 3),
        "check_s": round(check_s, 3),
        "per_check_s": {r.check: round(r.seconds, 4) for r in verdict.results},
    }


def untiled_noise(seeds: list[bytes], positions: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """Gumbel noise as it was computed before it was tiled: the same bits, the whole [B, V] at once, each step of
    the hash a new tensor (as `_mix32` then was)."""

    def _mix32(x: torch.Tensor) -> torch.Tensor:
        x = (((x >> 16) ^ x) * _MULTIPLIER) & _MASK32
        x = (((x >> 16) ^ x) * _MULTIPLIER) & _MASK32
        return (x >> 16) ^ x

    words = torch.tensor(seed_words(seeds), dtype=torch.int64).view(-1, 2)
    at = _mix32(_mix32(_mix32(words[:, 0]) ^ words[:, 1]) ^ (positions & _MASK32))
    high = _mix32(at[:, None] ^ torch.arange(vocab_size, dtype=torch.int64)[None, :])
    low = _mix32(high ^ _SALT)
    return -torch.log(-torch.log((((high << 21) + (low >> 11)).to(torch.float64) + 0.5) / 2.0**53))


def noise_figures(rows: int, vocab_size: int) -> dict[str, Any]:
    """The sampling noise for `rows` rows, tiled (`gumbel_noise`) and all at once, timed and compared."""
    seeds = [label_seed("bench-noise", str(i)) for i in range(rows)]
    positions = torch.arange(rows, dtype=torch.int64) % 12
    started = time.perf_counter()
    tiled = gumbel_noise(seeds, positions, vocab_size, torch.device("cpu"))
    tiled_s = time.perf_counter() - started
    started = time.perf_counter()
    whole = untiled_noise(seeds, positions, vocab_size)
    whole_s = time.perf_counter() - started
    return {"noise_rows": rows, "vocab": vocab_size, "tiled_s": round(tiled_s, 3), "untiled_s": round(whole_s, 3),
            "identical": torch.equal(tiled, whole)}  # fmt: skip


def real_model_check(model: str, prompts: int, repeats: int) -> None:
    """The real-model demo's round for one trainer and its check, the prefill both ways, `repeats` times each."""
    options = DemoOptions(model=model, prompts=prompts)
    options.check()
    spec = options.spec()
    loaded = load_folder(model_folder(model))
    for rows in (64, 256):
        print(json.dumps(noise_figures(rows, int(loaded.model.config.vocab_size))), flush=True)
    started = time.perf_counter()
    work = produce_work(loaded, spec, CONTEXT)
    print(json.dumps({"trainer_s": round(time.perf_counter() - started, 2), "generate_s": round(work.generate_s, 2),
                      "prove_s": round(work.prove_s, 2), "train_s": round(work.train_s, 2),
                      "samples": len(work.rollouts.samples)}), flush=True)  # fmt: skip
    pairs = [(sample.prompt_ids, sample.completion_ids) for sample in work.rollouts.samples]
    positions = {
        "whole": sum(len(p) + len(c) - 1 for p, c in pairs),
        "shared": sum(len(p) for p in {tuple(p) for p, _ in pairs}) + sum(len(c) - 1 for _, c in pairs),
    }
    for _ in range(repeats):
        for name, run in (("whole", whole_prefill), ("shared", prefill)):
            started = time.perf_counter()
            passes = run(loaded.model, pairs, loaded.tokenizer.pad_id, 16)
            seconds = time.perf_counter() - started
            toploc = check_toploc(work.rollouts, passes, spec)
            print(json.dumps({"prefill": name, "seconds": round(seconds, 2), "positions": positions[name],
                              "toploc_passed": toploc.passed, **toploc.figures}), flush=True)  # fmt: skip
        digest = work.rollouts.proofs_digest()
        claim = Claim(CONTEXT, cid_of_bytes(work.rollouts.to_bytes()), "update", work.rollouts.work_units,
                      CONTEXT.commitment(digest))  # fmt: skip
        started = time.perf_counter()
        verdict = verify_submission(claim, spec, loaded, Artifacts(work.rollouts.to_bytes, lambda: work.update))
        check_s = round(time.perf_counter() - started, 2)
        per_check = {r.check: round(r.seconds, 2) for r in verdict.results}
        print(json.dumps({"check_s": check_s, "valid": verdict.valid, "per_check_s": per_check}), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--sizes", default="tiny,small")
    parser.add_argument("--warmup-steps", type=int, default=400)
    parser.add_argument("--real-model", help="SmolLM2-135M-Instruct (smollm2) or a model folder")
    parser.add_argument("--prompts", type=int, default=8, help="with --real-model: prompts a trainer takes")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    parser.add_argument("--repeats", type=int, default=2)
    arguments = parser.parse_args()
    if arguments.threads:
        torch.set_num_threads(arguments.threads)
    print(json.dumps({"machine": platform.machine(), "cores": os.cpu_count(), "torch": torch.__version__,
                      "threads": torch.get_num_threads()}))  # fmt: skip
    if arguments.real_model:
        real_model_check(arguments.real_model, arguments.prompts, arguments.repeats)
        return
    for size in arguments.sizes.split(","):
        loaded = warm_model(size, 0, default_spec("arithmetic"))
        print(json.dumps({"size": size, "parameters": parameter_count(loaded.model)}))
        for batch in (1, 8, 32, 64):
            print(
                json.dumps({"size": size, **check_against_generation(loaded, batch, arguments.new_tokens)}), flush=True
            )
    loaded = warm_model("tiny", arguments.warmup_steps, default_spec("arithmetic"))
    submission_figures(loaded, None)  # warm up
    for adversary in (None, "inflated-rewards", "wrong-model", "forged-tokens", "garbage-update"):
        print(json.dumps({"submission": submission_figures(loaded, adversary)}), flush=True)


if __name__ == "__main__":
    main()
