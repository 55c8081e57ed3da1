"""Faults on a running task, with real node and validator processes; each ends with the auditor's money
check balancing and nothing paid twice. The chain mines a block every second, as a real one does
(several senders share blocks, time passes on its own); the tests still end windows by warping."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import httpx
import pytest
from helpers.devnet import BLOCK_TIME_S, TOKEN, create_small_task, funded_account, reveal_votes, warp
from helpers.proxy import TcpProxy
from helpers.relays import RelayProcess
from helpers.warm import run_crucible

from protocol.accounts import Signer
from protocol.artifacts.fetch import upload
from protocol.artifacts.store import LocalStore
from protocol.chain import devnet
from protocol.chain.client import Crucible, Role
from protocol.chain.connection import Chain
from protocol.chain.deployment import deploy
from protocol.chain.ids import submission_id, submission_text
from protocol.processes import free_port

pytestmark = [pytest.mark.integration, pytest.mark.slow]
CRUCIBLE = str(Path(sys.executable).parent / "crucible")
TRAINER_STAKE, VALIDATOR_STAKE = 1200 * TOKEN, 200 * TOKEN


@dataclass
class OneOnOne:
    """A one-round task with one staked trainer and one joined validator (keys for `--account env`)."""

    task_id: int
    trainer: Signer
    trainer_key: str
    validator: Signer
    validator_key: str

    def args(self, *extra: str) -> tuple[str, ...]:
        """`<role> run` arguments for this task's single round."""
        return ("--task", str(self.task_id), "--account", "env", "--rounds", "1", *extra)

    def stakes_whole(self, crucible: Crucible) -> bool:
        return (crucible.stake_account(self.trainer.address).staked == TRAINER_STAKE
                and crucible.stake_account(self.validator.address).staked == VALIDATOR_STAKE)  # fmt: skip


def one_on_one(crucible: Crucible, home: Path, model_cid: str, creator: Signer, label: str) -> OneOnOne:
    task_id = create_small_task(crucible, home, model_cid, creator, 2, rounds=1, validators_per_check=1).task_id
    trainer, trainer_key = funded_account(crucible, creator, f"{label}-trainer")
    crucible.stake(trainer, TRAINER_STAKE, Role.TRAINER)
    validator, validator_key = funded_account(crucible, creator, f"{label}-validator")
    crucible.stake(validator, VALIDATOR_STAKE, Role.VALIDATOR)
    crucible.join_task(validator, task_id)
    return OneOnOne(task_id, trainer, trainer_key, validator, validator_key)


def finish_round(crucible: Crucible, roles: Any, task_id: int, sid: int) -> None:
    """Moves round 0 of a one-round task through its windows once its roles did each window's work,
    then waits for every role process to exit cleanly."""
    deadlines = crucible.deadlines(task_id, 0)
    warp(crucible, deadlines.submit)
    reveal_votes(crucible, roles, task_id, 0, 1, 300)
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
    done = run_crucible(
        [CRUCIBLE, "--rpc", crucible.chain.rpc_url, "--deployment", str(folder / "deployment.json"), "audit",
         "money", str(task_id), "--json"],
        {**os.environ, "CRUCIBLE_HOME": str(home)}, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    books = json.loads(done.stdout)
    assert books["balanced"] and books["market"]["balanced"] and books["out"]["held_wei"] == "0"


def settled_once_and_balanced(crucible: Crucible, cast: OneOnOne, creator: Signer, home: Path, folder: Path) -> None:
    """After a fault: one submission, one attestation, one settlement, the honest trainer accepted and
    credited one reward, no honest stake lost; then the refund and the money check (`refund_and_balance`)."""
    sid = submission_id(cast.task_id, 0, cast.trainer.address)
    assert len(crucible.submissions(cast.task_id, 0)) == 1
    assert len(crucible.events("TaskMarket", "Attested", submissionId=sid)) == 1
    assert len(crucible.events("TaskMarket", "Settled", submissionId=sid)) == 1
    assert not crucible.submission(sid).rejected
    rewards = [e for e in crucible.events("TaskMarket", "Credited", taskId=cast.task_id, account=cast.trainer.address)
               if int(e["kind"]) == 0]  # fmt: skip
    assert len(rewards) == 1 and int(rewards[0]["amount"]) > 0
    assert cast.stakes_whole(crucible)
    refund_and_balance(crucible, creator, home, folder, cast.task_id)


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
    cast = one_on_one(crucible, crucible_home, model_cid_factory(crucible_home), dev[0], "reorg")
    task_id = cast.task_id
    node = roles.start("node", *cast.args(), key=cast.trainer_key)
    roles.wait_for("the submission", lambda: crucible.submissions(task_id, 0), 600)
    (submitted,) = crucible.submissions(task_id, 0)
    w3 = crucible.chain.w3
    # Replace every block from the submission's on: the submission is gone from the chain and the pool.
    depth = w3.eth.block_number - int(submitted["blockNumber"]) + 1
    w3.provider.make_request("anvil_reorg", [depth, []])  # type: ignore[arg-type]
    assert crucible.submissions(task_id, 0) == []
    roles.wait_for("the node to resubmit", lambda: crucible.submissions(task_id, 0), 120)
    assert node.seen("resubmitting", round=0)
    (again,) = crucible.submissions(task_id, 0)
    assert again["rolloutCid"] == submitted["rolloutCid"]  # the same work, sent again
    sid = submission_id(task_id, 0, cast.trainer.address)

    roles.start("validator", *cast.args(), key=cast.validator_key)
    finish_round(crucible, roles, task_id, sid)

    settled_once_and_balanced(crucible, cast, dev[0], crucible_home, tmp_path)


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
    cast = one_on_one(crucible, crucible_home, model_cid_factory(crucible_home), dev[0], "outage")
    task_id = cast.task_id
    proxy = TcpProxy(int(urlparse(crucible.chain.rpc_url).port or 0))
    roles.rpc_url = proxy.url
    node = roles.start("node", *cast.args(), key=cast.trainer_key)
    checker = roles.start("validator", *cast.args(), key=cast.validator_key)
    roles.wait_for("both roles started", lambda: node.seen("started") and checker.seen("started"), 300)
    proxy.cut()
    time.sleep(20)
    proxy.restore()
    assert node.seen("rpc_unreachable") and checker.seen("rpc_unreachable")
    sid = submission_id(task_id, 0, cast.trainer.address)
    roles.wait_for("the submission", lambda: crucible.submissions(task_id, 0), 300)
    finish_round(crucible, roles, task_id, sid)
    proxy.cut()
    settled_once_and_balanced(crucible, cast, dev[0], crucible_home, tmp_path)  # nothing sent twice


def test_a_trainer_and_a_validator_killed_mid_work_and_restarted_finish_the_round_once(
    model_cid_factory: Callable[[Path], str],
    crucible_home: Path,
    crucible: Crucible,
    dev: list[Signer],
    roles: Any,
    tmp_path: Path,
) -> None:
    """The node is SIGKILLed as its round's work begins, the validator as its check begins; each is restarted on its
    state folder. Broken versions: make the validator's `_voted` look-up always say no and drop its journal
    → the restarted checker attests a second time and the contract's MarketAlreadyVoted surfaces as
    `raced` (the count below still holds, the contract being the last guard); make NodeRunner resubmit
    without its journal and the on-chain look-up → the second `submit` reverts and the node exits 1."""
    cast = one_on_one(crucible, crucible_home, model_cid_factory(crucible_home), dev[0], "restart")
    task_id = cast.task_id
    args = cast.args()

    # Killed by the thread reading its events, the moment it reports the round's work begun.
    node = roles.start("node", *args, key=cast.trainer_key, kill_at=("round_opened", {}))
    roles.wait_for("the node killed at work", node.killed.is_set, 300)
    roles.kill(node)
    assert crucible.submissions(task_id, 0) == [], "killed before it submitted"
    roles.start("node", *args, key=cast.trainer_key)
    roles.wait_for("the submission", lambda: crucible.submissions(task_id, 0), 300)
    sid = submission_id(task_id, 0, cast.trainer.address)

    warp(crucible, crucible.deadlines(task_id, 0).submit)
    checking = ("checking", {"submission": submission_text(sid)})
    checker = roles.start("validator", *args, key=cast.validator_key, kill_at=checking)
    roles.wait_for("the validator killed at its check", checker.killed.is_set, 300)
    roles.kill(checker)
    assert not crucible.events("TaskMarket", "AttestationCommitted", submissionId=sid), "killed before it committed"
    roles.start("validator", *args, key=cast.validator_key)
    finish_round(crucible, roles, task_id, sid)
    settled_once_and_balanced(crucible, cast, dev[0], crucible_home, tmp_path)


def _served_bytes(relay: RelayProcess) -> int:
    return int(httpx.get(f"{relay.url}/healthz", timeout=5).json()["served_bytes"])


def test_a_relay_killed_during_a_check_and_one_serving_corrupted_bytes_cost_the_honest_trainer_nothing(
    model_cid_factory: Callable[[Path], str],
    crucible_home: Path,
    crucible: Crucible,
    dev: list[Signer],
    roles: Any,
    tmp_path: Path,
) -> None:
    """The node and the validator keep their own state folders and meet only through three relays: `bad`
    serves every file with one byte flipped, `slow` is killed once it has served the validator, before its
    verdict, `good` is sound. Untried relays are chosen in the order given, so the validator's first fetch goes
    to `bad`, then to `slow`. Broken version: drop the `verifier.matches()` test in Fetcher._attempt → the
    validator checks flipped bytes, rejects the honest submission and the trainer is slashed."""
    bad, slow, good = (RelayProcess(crucible_home, tmp_path / name, *options) for name, options in
                       (("bad", ()), ("slow", ("--rate-limit-mbps", "0.3")), ("good", ())))  # fmt: skip
    relays = (bad, slow, good)
    try:
        cast = one_on_one(crucible, crucible_home, model_cid_factory(crucible_home), dev[0], "relay")
        local = LocalStore(crucible_home / "store")
        for relay in relays:  # the creator's checkpoint and environment spec
            for cid in local.cids():
                upload(relay.url, local.path_for(cid), dev[0])
        task_id = cast.task_id
        args = cast.args("--store", ",".join(relay.url for relay in relays))

        roles.start("node", *args, key=cast.trainer_key, home=tmp_path / "node-home")
        roles.wait_for("the submission", lambda: crucible.submissions(task_id, 0), 300)
        sid = submission_id(task_id, 0, cast.trainer.address)
        for cid in LocalStore(bad.store).cids():
            damaged = bytearray((bad.store / cid).read_bytes())
            damaged[len(damaged) // 2] ^= 0xFF
            (bad.store / cid).write_bytes(bytes(damaged))

        warp(crucible, crucible.deadlines(task_id, 0).submit)
        served_before = _served_bytes(slow)
        checker = roles.start("validator", *args, key=cast.validator_key, home=tmp_path / "validator-home")
        # Killed once it has served the validator, before the validator's verdict. (The relay order sends the
        # validator's large downloads to `good`, measured faster; a transfer cut part-way and resumed from
        # another relay is the fetcher's own test, test_relay_faults.py.)
        deadline = time.monotonic() + 300
        while _served_bytes(slow) == served_before:
            assert time.monotonic() < deadline and checker.process.poll() is None, "the slow relay served nothing"
            time.sleep(0.05)
        slow.kill()
        assert not checker.seen("checked", submission=submission_text(sid)), "killed only after the check"
        finish_round(crucible, roles, task_id, sid)
    finally:
        for relay in relays:
            relay.kill()

    (attested,) = crucible.events("TaskMarket", "Attested", submissionId=sid)
    assert attested["valid"]
    settled_once_and_balanced(crucible, cast, dev[0], crucible_home, tmp_path)


def test_anvil_restarted_from_its_saved_state_mid_check_loses_nothing(
    model_cid_factory: Callable[[Path], str],
    crucible_home: Path,
    dev: list[Signer],
    roles: Any,
    tmp_path: Path,
) -> None:
    """A devnet of its own (Anvil with `--state`), stopped while the validator checks and started again
    from its saved state on the same port; both roles wait it out. Broken versions: start the second Anvil
    without `--state` → the chain restarts empty and the height check fails; drop `_keep_clock` from
    devnet.start_anvil → Anvil's next block carries the wall clock, before the warped submission deadline,
    the validator sees the check window not yet open and the wait for its attestation times out."""
    port = free_port()
    state, log = tmp_path / "anvil-state.json", tmp_path / "anvil.log"
    anvil = devnet.start_anvil(port, log, state, block_time_s=BLOCK_TIME_S)
    try:
        rpc_url = f"http://127.0.0.1:{port}"
        chain = Chain(rpc_url)
        deployment = deploy(chain, dev[0], token_holders=tuple(s.address for s in dev), unbonding_period_s=120)
        deployment.save(tmp_path / "deployment.json")  # where `roles` and the money check look
        roles.rpc_url = rpc_url
        crucible = Crucible(chain, deployment)
        cast = one_on_one(crucible, crucible_home, model_cid_factory(crucible_home), dev[0], "anvil")
        task_id = cast.task_id
        args = cast.args()
        roles.start("node", *args, key=cast.trainer_key)
        roles.wait_for("the submission", lambda: crucible.submissions(task_id, 0), 300)
        sid = submission_id(task_id, 0, cast.trainer.address)
        warp(crucible, crucible.deadlines(task_id, 0).submit)
        checker = roles.start("validator", *args, key=cast.validator_key)
        roles.wait_for(
            "the validator at its check", lambda: checker.seen("checking", submission=submission_text(sid)), 300
        )

        height = crucible.chain.w3.eth.block_number
        anvil.send_signal(signal.SIGTERM)  # Anvil writes its state on the way out
        anvil.wait(timeout=30)
        time.sleep(3)
        anvil = devnet.start_anvil(port, log, state, block_time_s=BLOCK_TIME_S)
        assert crucible.chain.w3.eth.block_number >= height, "the chain came back at its height, not from genesis"
        assert len(crucible.submissions(task_id, 0)) == 1, "the saved state kept the submission"
        finish_round(crucible, roles, task_id, sid)

        settled_once_and_balanced(crucible, cast, dev[0], crucible_home, tmp_path)
    finally:
        anvil.terminate()
        anvil.wait(timeout=30)
