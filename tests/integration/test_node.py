"""A real trainer node process on a real Anvil: one round → a submission whose artifacts check out."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any

import pytest

from protocol.accounts import Signer
from protocol.artifacts.manifest import load_manifest, load_state_dict
from protocol.artifacts.store import LocalStore
from protocol.chain import devnet
from protocol.chain.client import Crucible, Role
from protocol.chain.connection import Chain
from protocol.chain.deployment import Deployment
from protocol.chain.ids import commitment, parse_submission_id
from protocol.chain.params import demo_task_params
from protocol.ml.envs.spec import EnvSpec, default_spec
from protocol.ml.inference import prefill
from protocol.ml.model import load_checkpoint
from protocol.ml.proofs import verify_proofs
from protocol.ml.sampling import replay
from protocol.ml.tokenizer import completion_text
from protocol.work.rollouts import parse_rollouts
from protocol.work.round import RoundContext, assigned_slots

pytestmark = [pytest.mark.integration, pytest.mark.slow]
CRUCIBLE = str(Path(sys.executable).parent / "crucible")
TOKEN = 10**18


def cli(home: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CRUCIBLE_HOME": str(home)}
    return subprocess.run([CRUCIBLE, *args], capture_output=True, text=True, env=env, timeout=timeout)


def small_spec() -> EnvSpec:
    spec = default_spec("arithmetic")
    spec.training.prompts_per_round = 4
    spec.training.group_size = 4
    return spec


def read_events(stream: IO[str], until: str, timeout_s: float) -> list[dict[str, Any]]:
    """JSON events of a node's stdout up to (and with) the first `until`."""
    events: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        line = stream.readline()
        if not line:
            break
        events.append(json.loads(line))
        if events[-1]["event"] == until:
            return events
    raise AssertionError(f"no {until!r} event; got {[e['event'] for e in events]}")


def test_one_node_one_round_submits_work_whose_artifacts_verify(
    tiny_model: Path,
    crucible_home: Path,
    crucible: Crucible,
    chain: Chain,
    deployment: Deployment,
    dev: list[Signer],
    tmp_path: Path,
) -> None:
    published = cli(crucible_home, "model", "publish", str(tiny_model), "--json")
    assert published.returncode == 0, published.stderr
    model_cid = json.loads(published.stdout)["cid"]
    store = LocalStore(crucible_home / "store")
    spec = small_spec()
    env_cid = store.put(spec.canonical_bytes())
    params = demo_task_params(submit_window_s=600, validators_per_check=1)
    task_id = crucible.create_task(dev[0], params, model_cid, env_cid)
    trainer = dev[1]
    crucible.stake(trainer, 600 * TOKEN, Role.TRAINER)
    # One validator joins (so the round can be checked) but runs no process: its check goes unvoted, the
    # work stands and is paid.
    crucible.stake(dev[4], 200 * TOKEN, Role.VALIDATOR)
    crucible.join_task(dev[4], task_id)
    balance_before = crucible.balance_of(trainer.address)

    book = tmp_path / "deployment.json"
    command = [CRUCIBLE, "--rpc", chain.rpc_url, "--deployment", str(book), "node", "run", "--task", str(task_id)]
    command += ["--account", "dev1", "--rounds", "1", "--poll", "0.2", "--json"]
    env = {**os.environ, "CRUCIBLE_HOME": str(crucible_home)}
    node = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert node.stdout is not None
        events = read_events(node.stdout, "submitted", 240)
        submitted = events[-1]

        # On chain: the submission with both CIDs and a commitment binding chain, market, task, round, node.
        event = crucible.submitted(task_id, 0, trainer.address)
        assert event is not None
        assert (event["rolloutCid"], event["updateCid"]) == (submitted["rollout_cid"], submitted["update_cid"])
        rollouts = parse_rollouts(store.get(event["rolloutCid"]), event["rolloutCid"])
        expected = commitment(
            chain.chain_id, deployment.TaskMarket, task_id, 0, 0, trainer.address, rollouts.proofs_digest()
        )
        assert event["commitment"] == expected
        assert event["workUnits"] == rollouts.work_units == sum(len(s.completion_ids) for s in rollouts.samples)
        assert (rollouts.node, rollouts.checkpoint_cid, rollouts.env_cid) == (trainer.address, model_cid, env_cid)

        # The prompts are the ones the chain assigned this node; rewards are the environment's.
        context = RoundContext(
            chain.chain_id, deployment.TaskMarket, task_id, 0, trainer.address,
            crucible.round(task_id, 0).work_seed, model_cid, env_cid, 0,
        )  # fmt: skip
        slots = assigned_slots(spec, context)
        assert [(s.prompt_index, s.sample_index, s.prompt) for s in rollouts.samples] == [
            (slot.prompt_index, slot.sample_index, slot.problem.prompt) for slot in slots
        ]
        environment = spec.env()
        loaded = load_checkpoint(model_cid, store)
        for sample, slot in zip(rollouts.samples, slots, strict=True):
            assert sample.seed == "0x" + slot.seed.hex()
            assert sample.completion == completion_text(loaded.tokenizer, sample.completion_ids)
            assert sample.reward == environment.reward(slot.problem, sample.completion)

        # Proofs verify over a separate prefill pass of the checkpoint; the sampling replays exactly.
        passes = prefill(loaded.model, [(s.prompt_ids, s.completion_ids) for s in rollouts.samples], 0)
        for sample, recomputed in zip(rollouts.samples, passes, strict=True):
            figures = verify_proofs(recomputed.activations, sample.proof_bytes(), spec.toploc)
            assert all(chunk.passes(spec.toploc) for chunk in figures)
            assert (
                replay(
                    recomputed.logits, bytes.fromhex(sample.seed[2:]), sample.completion_ids, spec.sampling
                ).mismatches
                == []
            )

        # The update is a manifest of Δ over the checkpoint, one tensor per parameter.
        update = load_manifest(event["updateCid"], store)
        assert update.kind == "update" and update.parent == model_cid
        delta = load_state_dict(event["updateCid"], store)
        assert set(delta) == {name for name, _ in loaded.model.named_parameters()}

        # After the windows the node finalises the round, settles its submission and claims, then exits.
        # The round's check must start before its validate deadline (its seed fixed here, as any keeper may;
        # the node would too), or the round ends unverified and nothing in it is paid.
        devnet.warp_to(chain, crucible.deadlines(task_id, 0).submit)
        devnet.fix_check_seed(crucible, dev[0], task_id)
        assert crucible.round(task_id, 0).check_seed != bytes(32)
        devnet.warp_to(chain, crucible.deadlines(task_id, 0).challenge)
        remaining = read_events(node.stdout, "finished", 120)
        names = [e["event"] for e in remaining]
        assert "settled" in names and "claimed" in names
        assert node.wait(timeout=30) == 0
        claimed = int(next(e for e in remaining if e["event"] == "claimed")["amount_wei"])
        assert claimed > 0 and crucible.balance_of(trainer.address) == balance_before + claimed
        assert crucible.submission(parse_submission_id(submitted["submission"])).settled
    finally:
        if node.poll() is None:
            node.kill()
            node.wait()
