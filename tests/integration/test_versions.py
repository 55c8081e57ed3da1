"""Versions that never slash each other: a task pins its protocol version in its spec (bound by the CID the
chain holds). Software that does not speak it refuses the task in one line with nothing sent, and a
validator seated in it already (it joined under software that did) abstains from every check instead of
judging the work by rules the task did not choose."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers.devnet import LONG_S, TOKEN, funded_account, warp
from helpers.warm import run_crucible

from protocol.accounts import Signer
from protocol.artifacts.store import LocalStore
from protocol.chain.client import Crucible, Role
from protocol.chain.deployment import Deployment
from protocol.chain.ids import submission_text
from protocol.chain.params import PPM, demo_task_params
from protocol.ml.envs.spec import SPOKEN_VERSIONS, default_spec

pytestmark = [pytest.mark.integration]
CRUCIBLE = str(Path(sys.executable).parent / "crucible")


def test_a_task_of_a_version_it_does_not_speak_is_refused_and_never_judged(
    crucible_home: Path, crucible: Crucible, deployment: Deployment, dev: list[Signer], roles: Any, tmp_path: Path
) -> None:
    store = LocalStore(crucible_home / "store")
    newer = SPOKEN_VERSIONS[-1] + 1
    document = json.loads(default_spec("arithmetic").canonical_bytes()) | {"schema_version": newer}
    env_cid = store.put(json.dumps(document, sort_keys=True, separators=(",", ":")).encode())
    # What a version it does not speak means is not this software's to say: these bytes stand for a
    # checkpoint, rollouts and an update made under it (none of it reads as version-5 work).
    model_cid, rollout_cid, update_cid = (store.put(f"version {newer} {what}".encode()) for what in "mru")
    params = demo_task_params(rounds=1, sample_rate_ppm=PPM, validators_per_check=1, submit_window_s=LONG_S,
                              validate_window_s=LONG_S, challenge_window_s=LONG_S)  # fmt: skip
    task_id = crucible.create_task(dev[0], params, model_cid, env_cid)
    trainer, trainer_key = funded_account(crucible, dev[0], "version-trainer")
    crucible.stake(trainer, 1200 * TOKEN, Role.TRAINER)
    seated, seated_key = funded_account(crucible, dev[0], "version-seated")
    newcomer, newcomer_key = funded_account(crucible, dev[0], "version-newcomer")
    for signer in (seated, newcomer):
        crucible.stake(signer, 200 * TOKEN, Role.VALIDATOR)
    crucible.join_task(seated, task_id)  # it joined under software that spoke the task's version

    # Not in the task yet: a node and a validator refuse it in one line, and send nothing. Broken version:
    # let `_validated` read an unknown version as the newest one it speaks → the node starts on the task
    # (it fails later, on the checkpoint) and this check fails.
    book = tmp_path / "deployment.json"
    deployment.save(book)
    for role, signer, key in (("node", trainer, trainer_key), ("validator", newcomer, newcomer_key)):
        nonce = crucible.chain.w3.eth.get_transaction_count(signer.address)
        done = run_crucible(
            [CRUCIBLE, "--rpc", crucible.chain.rpc_url, "--deployment", str(book), role, "run", "--task", str(task_id),
             "--account", "env", "--rounds", "1"],
            {**os.environ, "CRUCIBLE_HOME": str(crucible_home), "CRUCIBLE_PRIVATE_KEY": key}, timeout=120,
        )  # fmt: skip
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 1 and len(lines) == 1, (role, done.stderr)
        assert f"pins protocol version {newer}; this software speaks versions 1-{newer - 1}" in lines[0], lines[0]
        assert crucible.chain.w3.eth.get_transaction_count(signer.address) == nonce, f"the {role} sent something"
    assert newcomer.address not in crucible.validators_of(task_id)

    # Work made under the task's version, which the seated validator is assigned (it is the only one).
    submission = crucible.submit_work(trainer, task_id, 0, rollout_cid, update_cid, 4, bytes(32))
    warp(crucible, crucible.deadlines(task_id, 0).submit)
    validator = roles.start("validator", "--task", str(task_id), "--account", "env", "--rounds", "1", key=seated_key)
    roles.wait_for("the abstention", lambda: validator.seen("abstained", submission=submission_text(submission)), 300)
    (abstained,) = [e for e in validator.events if e["event"] == "abstained"]
    assert f"pins protocol version {newer}" in abstained["reason"]
    assert any(e["event"] == "warning" and "abstains" in e["reason"] for e in validator.events)
    # Alone in the task, the seated validator holds every seat: above the task's declared colluding share (0.1),
    # which it reports and warns of (broken version: drop `report_validator_set` from its start → this fails).
    (found,) = [e for e in validator.events if e["event"] == "validator_set"]
    assert [h["address"] for h in found["holders"]] == [seated.address] and found["one_address_exceeds"], found
    assert any(e["event"] == "warning" and "alone holds more" in e["reason"] for e in validator.events)
    deadlines = crucible.deadlines(task_id, 0)
    warp(crucible, deadlines.validate)
    warp(crucible, max(deadlines.challenge, crucible.chain.now()))
    roles.wait_for("the validator to settle and exit", lambda: validator.process.poll() is not None, 300)
    assert validator.process.returncode == 0, validator.failed()

    # Never judged, so never slashed: the round ended unverified, the trainer's stake whole.
    assert crucible.events("TaskMarket", "Attested", submissionId=submission) == []
    assert not crucible.submission(submission).rejected
    assert crucible.stake_account(trainer.address).staked == 1200 * TOKEN
