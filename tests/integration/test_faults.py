"""Faults on a running task, with real node and validator processes; each ends with the auditor's money
check balancing and nothing paid twice."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
from helpers.devnet import TOKEN, create_small_task, credits, funded_account, warp
from helpers.proxy import TcpProxy

from protocol.accounts import Signer
from protocol.client import Crucible, Role
from protocol.ids import submission_id

pytestmark = [pytest.mark.integration, pytest.mark.slow]
CRUCIBLE = str(Path(sys.executable).parent / "crucible")


def finish_round(crucible: Crucible, roles: Any, task_id: int, sid: int) -> None:
    """Moves round 0 of a one-round task through its windows once its roles did each window's work,
    then waits for every role process to exit cleanly."""
    deadlines = crucible.deadlines(task_id, 0)
    warp(crucible, deadlines.submit)
    roles.wait_for("the attestation", lambda: crucible.events("TaskMarket", "Attested", submissionId=sid), 300)
    warp(crucible, deadlines.validate)
    roles.wait_for("an agreed checkpoint", lambda: crucible.round(task_id, 0).agreed_next != bytes(32), 300)
    warp(crucible, deadlines.challenge)
    for process in roles.started:
        roles.wait_for(f"`{process.command}` to finish", lambda p=process: p.process.poll() is not None, 300)
        assert process.process.returncode == 0, process.failed()


def refund_and_balance(crucible: Crucible, creator: Signer, home: Path, folder: Path, task_id: int) -> None:
    """The creator takes back what is left; `crucible audit money` must balance to the wei, holding nothing."""
    if crucible.task(task_id).pool:
        crucible.refund(creator, task_id)
    done = subprocess.run(
        [CRUCIBLE, "--rpc", crucible.chain.rpc_url, "--deployment", str(folder / "deployment.json"), "audit",
         "money", str(task_id), "--json"],
        capture_output=True, text=True, env={**os.environ, "CRUCIBLE_HOME": str(home)}, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    books = json.loads(done.stdout)
    assert books["balanced"] and books["market"]["balanced"] and books["out"]["held"] == "0"


def test_a_reorg_that_drops_a_submission_is_noticed_and_the_node_resubmits(
    model_cid_factory: Callable[[Path], str],
    crucible_home: Path,
    crucible: Crucible,
    dev: list[Signer],
    roles: Any,
    tmp_path: Path,
) -> None:
    """Broken versions: remove the `_check_still_submitted` call from NodeRunner.run → the node believes
    it submitted, the chain has no submission, and the wait for a second WorkSubmitted times out; remove
    its `forget_nonce` → the resubmission takes a nonce past the chain's count and never mines."""
    task = create_small_task(crucible, crucible_home, model_cid_factory(crucible_home), dev[0], 2, rounds=1,
                             validators_per_check=1)  # fmt: skip
    trainer, trainer_key = funded_account(crucible, dev[0], "reorg-trainer")
    crucible.stake(trainer, 1200 * TOKEN, Role.TRAINER)
    validator, validator_key = funded_account(crucible, dev[0], "reorg-validator")
    crucible.stake(validator, 200 * TOKEN, Role.VALIDATOR)
    crucible.join_task(validator, task.task_id)
    node = roles.start("node", "--task", str(task.task_id), "--account", "env", "--rounds", "1", key=trainer_key)
    roles.wait_for("the submission", lambda: crucible.submissions(task.task_id, 0), 600)
    (submitted,) = crucible.submissions(task.task_id, 0)
    w3 = crucible.chain.w3
    # Replace every block from the submission's on: the submission is gone from the chain and the pool.
    depth = w3.eth.block_number - int(submitted["blockNumber"]) + 1
    w3.provider.make_request("anvil_reorg", [depth, []])  # type: ignore[arg-type]
    assert crucible.submissions(task.task_id, 0) == []
    roles.wait_for("the node to resubmit", lambda: crucible.submissions(task.task_id, 0), 120)
    assert node.seen("resubmitting", round=0)
    (again,) = crucible.submissions(task.task_id, 0)
    assert again["rolloutCid"] == submitted["rolloutCid"]  # the same work, sent again
    sid = submission_id(task.task_id, 0, trainer.address)

    roles.start("validator", "--task", str(task.task_id), "--account", "env", "--rounds", "1", key=validator_key)
    finish_round(crucible, roles, task.task_id, sid)

    # The honest node: paid once, stake whole; the books balance.
    assert len(crucible.events("TaskMarket", "Settled", submissionId=sid)) == 1
    assert credits(crucible, task.task_id, trainer.address, 0) > 0
    assert crucible.stake_account(trainer.address).staked == 1200 * TOKEN
    refund_and_balance(crucible, dev[0], crucible_home, tmp_path, task.task_id)


def test_an_rpc_outage_is_waited_out_and_nothing_is_sent_twice(
    model_cid_factory: Callable[[Path], str],
    crucible_home: Path,
    crucible: Crucible,
    dev: list[Signer],
    roles: Any,
    tmp_path: Path,
) -> None:
    """The node and the validator reach the chain through a proxy that is cut for 20 s (longer than the
    provider's own retries) while they work. Broken version: make Participant.poll_until re-raise
    RpcUnreachable → both processes exit 1 with "RPC endpoint ... is unreachable" and the test fails."""
    task = create_small_task(crucible, crucible_home, model_cid_factory(crucible_home), dev[0], 2, rounds=1,
                             validators_per_check=1)  # fmt: skip
    trainer, trainer_key = funded_account(crucible, dev[0], "outage-trainer")
    crucible.stake(trainer, 1200 * TOKEN, Role.TRAINER)
    validator, validator_key = funded_account(crucible, dev[0], "outage-validator")
    crucible.stake(validator, 200 * TOKEN, Role.VALIDATOR)
    crucible.join_task(validator, task.task_id)
    proxy = TcpProxy(int(urlparse(crucible.chain.rpc_url).port or 0))
    roles.rpc_url = proxy.url
    node = roles.start("node", "--task", str(task.task_id), "--account", "env", "--rounds", "1", key=trainer_key)
    checker = roles.start("validator", "--task", str(task.task_id), "--account", "env", "--rounds", "1",
                          key=validator_key)  # fmt: skip
    roles.wait_for("both roles started", lambda: node.seen("started") and checker.seen("started"), 300)
    proxy.cut()
    time.sleep(20)
    proxy.restore()
    assert node.seen("rpc_unreachable") and checker.seen("rpc_unreachable")
    sid = submission_id(task.task_id, 0, trainer.address)
    roles.wait_for("the submission", lambda: crucible.submissions(task.task_id, 0), 300)
    finish_round(crucible, roles, task.task_id, sid)
    proxy.cut()
    # Nothing sent twice: one submission, one attestation, one settlement, the stake whole.
    assert len(crucible.submissions(task.task_id, 0)) == 1
    assert len(crucible.events("TaskMarket", "Attested", submissionId=sid)) == 1
    assert len(crucible.events("TaskMarket", "Settled", submissionId=sid)) == 1
    assert crucible.stake_account(trainer.address).staked == 1200 * TOKEN
    refund_and_balance(crucible, dev[0], crucible_home, tmp_path, task.task_id)
