"""LoRA against full updates on SmolLM2-135M-Instruct, side by side in one run: the demo's task and one
node's round (16 prompts x 8 completions), the same rollouts trained both ways. Reports the update's
bytes on the wire (its safetensors shards), the trainer's update time, and a validator's whole check of
the submission with the time of its update replay.

Run: .venv/bin/python -m bench.lora [--prompts 16] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from demo.options import DemoOptions
from node.work import RoundWork, produce_work
from protocol.artifacts.cid import cid_of_bytes
from protocol.artifacts.manifest import load_manifest, save_state_dict
from protocol.artifacts.store import LocalStore
from protocol.ml.importing import packaged_model_folder
from protocol.ml.model import load_folder
from protocol.work.checks import Artifacts, Claim, verify_submission
from protocol.work.round import RoundContext, round_update

CONTEXT = RoundContext(31337, "0x9fE46736679d2D9a65F0992F2272dE9f3c7fa6e0", 1, 0,
                       "0x70997970C51812dc3A010C7d01b50e0d17dc79C8", b"\x42" * 32, cid_of_bytes(b"checkpoint"),
                       cid_of_bytes(b"env"), 0)  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    options = DemoOptions(prompts=args.prompts)
    options.check()
    lora_spec = options.spec()
    full_spec = lora_spec.model_copy(deep=True)
    full_spec.training.adapter.kind = "full"
    full_spec.training.learning_rate = 1e-5  # a full fine-tune's usual rate; bytes and times do not depend on it
    loaded = load_folder(packaged_model_folder("smollm2"))
    work = produce_work(loaded, lora_spec, CONTEXT)
    rows: dict[str, Any] = {}
    for name, spec in (("lora r8", lora_spec), ("full", full_spec)):
        started = time.perf_counter()
        update = work.update if name.startswith("lora") else round_update(loaded, work.rollouts, spec, CONTEXT)
        train_s = work.train_s if name.startswith("lora") else time.perf_counter() - started
        with tempfile.TemporaryDirectory() as folder:
            store = LocalStore(Path(folder))
            wire = sum(shard.size for shard in load_manifest(save_state_dict(update, store, "update"), store).shards)
        digest = work.rollouts.proofs_digest()
        bound = CONTEXT.commitment(digest)
        claim = Claim(CONTEXT, cid_of_bytes(work.rollouts.to_bytes()), "update", work.rollouts.work_units, bound)
        submission = RoundWork(work.rollouts, update)
        started = time.perf_counter()
        verdict = verify_submission(claim, spec, loaded, Artifacts(submission.rollouts.to_bytes, lambda u=update: u))
        check_s = time.perf_counter() - started
        rows[name] = {
            "update_bytes": wire,
            "tensors": len(update),
            "train_s": round(train_s, 1),
            "check_s": round(check_s, 1),
            "update_replay_s": round(next(r.seconds for r in verdict.results if r.check == "update"), 1),
            "valid": verdict.valid,
        }
        print(f"{name}: {rows[name]}", flush=True)
    ratio = rows["lora r8"]["update_bytes"] / rows["full"]["update_bytes"]
    document = {
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}",
        "completions": len(work.rollouts.samples),
        "generate_s": round(work.generate_s, 1),
        "rows": rows,
        "lora_share_of_full": round(ratio, 5),
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024,
    }
    print(json.dumps(document, indent=2) if args.json else f"LoRA update is {100 * ratio:.2f} % of a full one")


if __name__ == "__main__":
    main()
