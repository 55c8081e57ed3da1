"""A verifier's own faults are never verdicts: a damaged local copy is set aside and fetched again, a
validator cut off from every source abstains, an auditor reports what it could not verify as its own
note. Real node, validator and relay processes on the session's Anvil."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers.devnet import warp
from helpers.relays import RelayProcess
from helpers.warm import run_crucible
from test_faults import CRUCIBLE, finish_round, one_on_one, refund_and_balance, settled_once_and_balanced

from protocol.accounts import Signer
from protocol.artifacts.fetch import upload
from protocol.artifacts.manifest import parse_manifest
from protocol.artifacts.store import LocalStore
from protocol.chain.client import Crucible
from protocol.chain.ids import submission_id, submission_text
from protocol.processes import free_port

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _damage(path: Path) -> None:
    """Flips one byte in the middle of a file (disk rot, a torn write)."""
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def _audit(home: Path, crucible: Crucible, folder: Path, task_id: int, *args: str) -> subprocess.CompletedProcess[str]:
    command = [CRUCIBLE, "--rpc", crucible.chain.rpc_url, "--deployment", str(folder / "deployment.json"), "audit",
               "task", str(task_id), "--no-evaluate", "--json", *args]  # fmt: skip
    return run_crucible(command, {**os.environ, "CRUCIBLE_HOME": str(home)}, timeout=300)


def test_damaged_local_copies_are_fetched_again_and_never_become_verdicts(
    model_cid_factory: Callable[[Path], str],
    crucible_home: Path,
    crucible: Crucible,
    dev: list[Signer],
    roles: Any,
    tmp_path: Path,
) -> None:
    """The validator's cache holds the honest trainer's rollout file and update shard, each with one byte
    flipped, before it checks: it sets them aside, fetches them again from the relay, attests valid and
    the trainer keeps its stake. Then auditors: one through the relay with damaged copies again (no
    finding, exit 0), one with only its own damaged folder (no finding, exit 0, a note that it could not
    verify). Broken version: make `LocalStore.get` raise a plain ArtifactError for a damaged copy and
    leave it in place (the old code) → the validator attests invalid, the trainer is slashed, and the
    auditors report wrong-outcome and validator-disagrees."""
    relay = RelayProcess(crucible_home, tmp_path / "relay")
    try:
        cast = one_on_one(crucible, crucible_home, model_cid_factory(crucible_home), dev[0], "damage")
        local = LocalStore(crucible_home / "store")
        for cid in local.cids():  # the creator's checkpoint and environment spec
            upload(relay.url, local.path_for(cid), dev[0])
        task_id, args = cast.task_id, cast.args("--store", relay.url)
        roles.start("node", *args, key=cast.trainer_key, home=tmp_path / "node-home")
        roles.wait_for("the submission", lambda: crucible.submissions(task_id, 0), 300)
        sid = submission_id(task_id, 0, cast.trainer.address)
        (submitted,) = crucible.submissions(task_id, 0)
        node_store = LocalStore(tmp_path / "node-home" / "store")
        manifest = parse_manifest(node_store.get(submitted["updateCid"]), submitted["updateCid"])
        damaged = [submitted["rolloutCid"], submitted["updateCid"], manifest.shards[0].cid]
        validator_store = LocalStore(tmp_path / "validator-home" / "store")
        for cid in damaged:
            shutil.copy(node_store.path_for(cid), validator_store.path_for(cid))
            _damage(validator_store.path_for(cid))

        warp(crucible, crucible.deadlines(task_id, 0).submit)
        roles.start("validator", *args, key=cast.validator_key, home=tmp_path / "validator-home")
        finish_round(crucible, roles, task_id, sid)
        (attested,) = crucible.events("TaskMarket", "Attested", submissionId=sid)
        assert attested["valid"], "the honest submission was attested invalid from a damaged local copy"
        settled_once_and_balanced(crucible, cast, dev[0], crucible_home, tmp_path)
        assert all(validator_store.get(cid) == node_store.get(cid) for cid in damaged)

        # An auditor whose cache is damaged in the same places, with the relay to fetch from.
        auditor_home = tmp_path / "auditor-home"
        auditor_store = LocalStore(auditor_home / "store")
        for cid in damaged:
            shutil.copy(node_store.path_for(cid), auditor_store.path_for(cid))
            _damage(auditor_store.path_for(cid))
        done = _audit(auditor_home, crucible, tmp_path, task_id, "--store", relay.url)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr
        report = json.loads(done.stdout)
        assert report["findings"] == [] and report["rounds"][0]["submissions"][0]["rerun"]["valid"] is True
    finally:
        relay.kill()

    # An auditor with nothing but its own folder, damaged: it cannot verify, and says so as its own fault.
    alone = tmp_path / "alone"
    alone_store = LocalStore(alone / "store")
    for folder in (crucible_home, tmp_path / "node-home", tmp_path / "validator-home"):  # every file, evidence too
        for cid in LocalStore(folder / "store").cids():
            shutil.copy(folder / "store" / cid, alone_store.path_for(cid))
    for cid in damaged:
        _damage(alone / "store" / cid)
    done = _audit(alone, crucible, tmp_path, cast.task_id)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr
    report = json.loads(done.stdout)
    assert report["findings"] == [], report["findings"]
    assert any("could not verify" in note and "damaged" in note for note in report["notes"]), report["notes"]


def test_a_validator_cut_off_from_every_relay_abstains_and_slashes_nobody(
    model_cid_factory: Callable[[Path], str],
    crucible_home: Path,
    crucible: Crucible,
    dev: list[Signer],
    roles: Any,
    tmp_path: Path,
) -> None:
    """The validator holds the checkpoint and the environment spec, but its only relay address answers
    nothing (its network is down). It defers the check, retries, and abstains as the window closes: no
    attestation, no fee, no slash; the honest submission is accepted and paid. Broken version: let
    `verify_submission` turn OwnFault into a failed availability check (drop its `except OwnFault:
    raise`) → the validator attests invalid and the honest trainer is slashed."""
    cast = one_on_one(crucible, crucible_home, model_cid_factory(crucible_home), dev[0], "cutoff")
    task_id = cast.task_id
    roles.start("node", *cast.args(), key=cast.trainer_key)
    roles.wait_for("the submission", lambda: crucible.submissions(task_id, 0), 300)
    sid = submission_id(task_id, 0, cast.trainer.address)
    cut_off = tmp_path / "validator-home"
    shutil.copytree(crucible_home / "store", cut_off / "store")  # the creator's files and the trainer's
    (submitted,) = crucible.submissions(task_id, 0)
    for path in (cut_off / "store").iterdir():  # ...less the submission, which it must fetch
        if path.name in (submitted["rolloutCid"], submitted["updateCid"]):
            path.unlink()
    dead = f"http://127.0.0.1:{free_port()}"

    deadlines = crucible.deadlines(task_id, 0)
    warp(crucible, deadlines.submit)
    checker = roles.start("validator", *cast.args("--store", dead), key=cast.validator_key, home=cut_off)
    roles.wait_for("the check deferred", lambda: checker.seen("verify_deferred", submission=submission_text(sid)), 300)
    warp(crucible, deadlines.validate - 3)
    roles.wait_for("the validator to abstain", lambda: checker.seen("abstained", submission=submission_text(sid)), 120)
    assert "could not reach any relay" in checker.seen("abstained")[0]["reason"]
    warp(crucible, deadlines.validate)
    warp(crucible, deadlines.challenge)
    for process in roles.started:
        roles.wait_for(f"`{process.command}` to finish", lambda p=process: p.process.poll() is not None, 300)
        assert process.process.returncode == 0, process.failed()

    assert not crucible.events("TaskMarket", "Attested", submissionId=sid)
    assert [e["validator"] for e in crucible.events("TaskMarket", "ValidatorMissed", submissionId=sid)] == [
        cast.validator.address
    ]
    assert not crucible.submission(sid).rejected and crucible.submission(sid).settled
    assert cast.stakes_whole(crucible), "nobody is slashed for the validator's own network"
    refund_and_balance(crucible, dev[0], crucible_home, tmp_path, task_id)
