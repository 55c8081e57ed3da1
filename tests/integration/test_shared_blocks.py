"""Several senders in one block, and a base fee that moves under a pending transaction: what a chain
that mines on an interval does every day, on the session's real Anvil. Where a test must decide which
block holds what, it stops the interval mining and mines by hand, then starts it again."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from helpers.devnet import TOKEN, create_small_task, manual_mining, warp
from helpers.proxy import NoTraceRpc

from protocol.accounts import Signer
from protocol.artifacts.store import LocalStore
from protocol.chain.client import Crucible
from protocol.chain.connection import Chain
from protocol.errors import OutOfGas
from protocol.runtime.participant import Participant
from protocol.runtime.reporter import Reporter

pytestmark = pytest.mark.integration


def _rpc(crucible: Crucible, method: str, *params: Any) -> Any:
    return crucible.chain.w3.provider.make_request(method, list(params))  # type: ignore[arg-type]


def _wait_in_pool(crucible: Crucible, sender: str, count: int) -> None:
    """Waits until `sender` has `count` transactions beyond its mined ones in the pool."""
    w3 = crucible.chain.w3
    deadline = time.monotonic() + 30
    while w3.eth.get_transaction_count(sender, "pending") - w3.eth.get_transaction_count(sender) < count:
        assert time.monotonic() < deadline, "the transaction never reached the pool"
        time.sleep(0.05)


@pytest.mark.parametrize("rpc", ["traced", "no traces"])
def test_two_finalisers_in_one_block_the_loser_is_told_it_raced(
    rpc: str, crucible: Crucible, dev: list[Signer], crucible_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two keepers finalise the one round of a task; both transactions wait in the pool and are mined in
    one block. The second reverts with MarketTaskEnded, which a replay on the state before the block
    cannot see (there the round is still open). The keepers explain it from Anvil's trace, or, through an
    endpoint that serves no traces, from a replay after the block. Broken version: explain failures with
    `eth_call(..., block_identifier=blockNumber - 1)` and no trace (the old `Chain._failed`) → the loser
    gets an undecoded "transaction 0x… failed", `keep_round` raises it and its thread dies; keep the trace
    but replay before the block in the fallback → only the "no traces" case fails."""
    endpoint = NoTraceRpc(crucible.chain.rpc_url) if rpc == "no traces" else None
    try:
        _race_two_finalisers(crucible, dev, crucible_home, capsys, endpoint.url if endpoint else crucible.chain.rpc_url)
    finally:
        if endpoint is not None:
            endpoint.close()


def _race_two_finalisers(
    crucible: Crucible, dev: list[Signer], crucible_home: Path, capsys: pytest.CaptureFixture[str], rpc_url: str
) -> None:
    store = LocalStore(crucible_home / "store")
    task = create_small_task(crucible, crucible_home, store.put(b"a model nobody loads"), dev[0], 2, rounds=1)
    warp(crucible, crucible.deadlines(task.task_id, 0).challenge)
    state, deadlines = crucible.round(task.task_id, 0), crucible.deadlines(task.task_id, 0)
    keepers = [
        Participant(
            Crucible(Chain(rpc_url), crucible.deployment),
            signer,
            store,
            Reporter(f"keeper{index}", json_lines=True),
            task.task_id,
        )
        for index, signer in enumerate((dev[3], dev[4]))
    ]
    outcomes: dict[str, Any] = {}

    def keep(keeper: Participant) -> None:
        try:
            outcomes[keeper.address] = keeper.keep_round(0, state, deadlines, keeper.crucible.chain.now())
        except BaseException as error:  # the test reports whatever escaped
            outcomes[keeper.address] = error

    with manual_mining(crucible):
        threads = []
        for keeper in keepers:  # one at a time into the pool, so both estimate on the open round
            threads.append(threading.Thread(target=keep, args=(keeper,)))
            threads[-1].start()
            _wait_in_pool(crucible, keeper.address, 1)
        _rpc(crucible, "evm_mine")
        for thread in threads:
            thread.join(timeout=60)
    assert sorted(map(repr, outcomes.values())) == ["False", "True"], outcomes
    block = crucible.chain.w3.eth.get_block("latest", full_transactions=True)
    receipts = [crucible.chain.w3.eth.get_transaction_receipt(tx["hash"]) for tx in block["transactions"]]
    assert [r["status"] for r in receipts] == [1, 0], "both finalisations were mined in one block, the second failed"
    events = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    raced = [e for e in events if e["event"] == "raced"]
    assert len(raced) == 1 and raced[0]["revert"] == "MarketTaskEnded" and raced[0]["step"] == "finalise_round"
    assert crucible.task(task.task_id).ended


def test_out_of_gas_is_reported_as_out_of_gas(crucible: Crucible, dev: list[Signer]) -> None:
    """A transfer given less gas than it needs fails with "ran out of gas", naming what it used. Broken
    version: drop the gas-used test in `Chain._failed` → a replay (with the block's gas) passes and the
    error says only "failed"."""
    with pytest.raises(OutOfGas, match="ran out of gas: it used 30,000 of its limit of 30,000"):
        crucible.chain.transact(crucible.token.functions.transfer(dev[8].address, TOKEN), dev[6], gas=30_000)


def test_a_pending_transaction_is_repriced_when_the_base_fee_jumps_tenfold(
    crucible: Crucible, dev: list[Signer]
) -> None:
    """A transfer waits in the pool, priced for the base fee of the moment; then the next block's base fee
    is set ten times higher and blocks come every second. The sender re-prices it (same nonce) and it
    lands within three blocks of the jump. Broken version: make `Sender._reprice` return at once → the
    transaction waits until the base fee decays below its cap (about eight blocks of 12.5 % each)."""
    chain = Chain(crucible.chain.rpc_url, poll_interval_s=0.1)
    sender, recipient = dev[7], dev[8].address
    before = crucible.balance_of(recipient)
    result: dict[str, Any] = {}

    def send() -> None:
        try:
            result["receipt"] = chain.transact(chain.contract("DevToken", crucible.token.address).functions.transfer(
                recipient, TOKEN), sender)  # fmt: skip
        except BaseException as error:  # the test reports what escaped
            result["error"] = error

    with manual_mining(crucible):
        thread = threading.Thread(target=send)
        thread.start()
        _wait_in_pool(crucible, sender.address, 1)
        offered = crucible.chain.w3.eth.get_transaction(
            crucible.chain.w3.eth.get_block("pending", full_transactions=True)["transactions"][0]["hash"]
        )["maxFeePerGas"]
        base_fee = crucible.chain.next_base_fee()
        assert base_fee is not None
        # Tenfold, and at least four times its cap (the priority fee can dominate a tiny base fee): priced
        # out for a dozen blocks of decay unless re-priced.
        jumped = max(10 * base_fee, 4 * offered)
        _rpc(crucible, "anvil_setNextBlockBaseFeePerGas", hex(jumped))
        jump_block = crucible.chain.w3.eth.block_number + 1
        _rpc(crucible, "evm_setIntervalMining", 1)
        thread.join(timeout=60)
    assert "error" not in result, result
    receipt = result["receipt"]
    assert receipt["blockNumber"] - jump_block <= 2, f"mined {receipt['blockNumber'] - jump_block} blocks after"
    assert chain.sender.repriced >= 1 and receipt["effectiveGasPrice"] > offered
    assert crucible.balance_of(recipient) - before == TOKEN
