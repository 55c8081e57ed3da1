"""The chain layer against a real Anvil: concurrent senders, retries, confirmations, reverts."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlparse

import pytest
from helpers.devnet import manual_mining
from helpers.proxy import TcpProxy
from pydantic import ValidationError

from protocol.accounts import Signer
from protocol.artifacts.cid import cid_of_bytes
from protocol.chain import devnet
from protocol.chain.client import Crucible, Role
from protocol.chain.connection import Chain
from protocol.chain.devnet import LocalChain
from protocol.chain.params import TaskParams, demo_task_params, honest_majority, least_deterrent_slash
from protocol.errors import ChainError, ConfigError, ContractRevert, RpcUnreachable
from protocol.processes import free_port

pytestmark = pytest.mark.integration
TOKEN = 10**18


def test_concurrent_senders_share_one_key(crucible: Crucible, dev: list[Signer]) -> None:
    """Twenty transfers from one key on four threads: every nonce used once, every transfer mined."""
    recipient = dev[9].address
    before = crucible.balance_of(recipient)
    start_nonce = crucible.chain.w3.eth.get_transaction_count(dev[1].address)
    with ThreadPoolExecutor(max_workers=4) as pool:
        receipts = list(pool.map(lambda i: crucible.transfer(dev[1], recipient, TOKEN + i), range(20)))
    assert all(receipt["status"] == 1 for receipt in receipts)
    assert crucible.balance_of(recipient) - before == sum(TOKEN + i for i in range(20))
    assert crucible.chain.w3.eth.get_transaction_count(dev[1].address) == start_nonce + 20


def test_two_processes_worth_of_senders_resynchronise(anvil: LocalChain, crucible: Crucible, dev: list[Signer]) -> None:
    """A second Chain object (another process, say) using the same key does not wedge the first."""
    other = Crucible(Chain(anvil.rpc_url), crucible.deployment)
    crucible.transfer(dev[2], dev[9].address, 1)
    other.transfer(dev[2], dev[9].address, 1)
    crucible.transfer(dev[2], dev[9].address, 1)  # its cached nonce is stale: it must resync
    other.transfer(dev[2], dev[9].address, 1)


def test_transport_errors_are_retried_until_the_node_answers(tmp_path: Path) -> None:
    """The RPC comes up 0.6 s after the first request: the backoff retries carry the call through."""
    port = free_port()
    holder: dict[str, object] = {}

    def start_later() -> None:
        time.sleep(0.6)
        holder["process"] = devnet.start_anvil(port, tmp_path / "late.log")

    thread = threading.Thread(target=start_later)
    thread.start()
    try:
        chain = Chain(f"http://127.0.0.1:{port}", retries=8, backoff_s=0.1)
        assert chain.chain_id == 31337
    finally:
        thread.join()
        process = holder.get("process")
        if process is not None:
            process.terminate()  # type: ignore[attr-defined]
            process.wait(timeout=10)  # type: ignore[attr-defined]


def test_unreachable_rpc_is_one_clear_error() -> None:
    port = free_port()
    with pytest.raises(ChainError, match=f"RPC endpoint http://127.0.0.1:{port} is unreachable"):
        Chain(f"http://127.0.0.1:{port}", retries=2, backoff_s=0.01)


def test_wrong_chain_id_refused(anvil: LocalChain) -> None:
    with pytest.raises(ChainError, match="chain id 31337, expected 1"):
        Chain(anvil.rpc_url, expected_chain_id=1)


def test_receipt_waits_for_confirmation_depth(anvil: LocalChain, crucible: Crucible, dev: list[Signer]) -> None:
    deep = Chain(anvil.rpc_url, confirmations=3, poll_interval_s=0.02)
    stop = threading.Event()

    def mine() -> None:
        while not stop.wait(0.05):
            deep.w3.provider.make_request("evm_mine", [])  # type: ignore[arg-type]

    miner = threading.Thread(target=mine)
    miner.start()
    try:
        receipt = Crucible(deep, crucible.deployment).transfer(dev[3], dev[9].address, 1)
        assert deep.w3.eth.block_number - receipt["blockNumber"] >= 3
    finally:
        stop.set()
        miner.join()


def test_custom_errors_decoded(crucible: Crucible, dev: list[Signer]) -> None:
    with pytest.raises(ContractRevert) as caught:
        crucible.join_task(dev[4], 42, TOKEN)
    assert caught.value.name == "MarketUnknownTask"
    assert caught.value.args_by_name == {"taskId": 42}
    crucible.stake(dev[4], 10 * TOKEN, Role.VALIDATOR)
    # The client refuses the wrong role before it sends the approval; sent anyway, the manager's error decodes.
    with pytest.raises(ConfigError, match="is staked as a validator"):
        crucible.stake(dev[4], TOKEN, Role.TRAINER)
    crucible.ensure_allowance(dev[4], crucible.stakes.address, TOKEN)
    with pytest.raises(ContractRevert, match=r"StakeRoleMismatch.*staked for another role"):
        crucible.chain.transact(crucible.stakes.functions.stake(TOKEN, int(Role.TRAINER)), dev[4])
    with pytest.raises(ContractRevert, match="StakeInsufficientFree"):
        crucible.request_unstake(dev[4], 11 * TOKEN)


@pytest.mark.parametrize(
    ("changes", "error", "args"),
    [
        ({"rounds": 1001}, "MarketParameterAbove", {"name": "rounds", "value": 1001, "most": 1000}),
        ({"validator_slash_wei": 0}, "MarketParameterBelow", {"name": "validatorSlash", "value": 0, "least": 1}),
        ({"dispute_bond_wei": 9 * TOKEN}, "MarketParameterBelow",
         {"name": "disputeBond", "value": 9 * TOKEN, "least": 10 * TOKEN}),
        ({"submit_window_s": 4}, "MarketParameterBelow", {"name": "submitWindow", "value": 4, "least": 5}),
        ({"colluding_share_ppm": 500_000}, "MarketParameterAbove",
         {"name": "colludingSharePpm", "value": 500_000, "most": 499_999}),
        ({"canary_rate_ppm": 500_001}, "MarketParameterAbove",
         {"name": "canaryRatePpm", "value": 500_001, "most": 500_000}),
    ],
)  # fmt: skip
def test_the_chain_refuses_what_task_params_refuses(
    crucible: Crucible, dev: list[Signer], changes: dict[str, int], error: str, args: dict[str, object]
) -> None:
    """Numbers past `TaskParams`' checks (built unchecked) meet the same limits on chain, named with the
    bound they broke; the bounds themselves pass both."""
    values = demo_task_params().model_dump() | changes
    with pytest.raises(ValidationError):
        TaskParams(**values)
    model, env = cid_of_bytes(b"model"), cid_of_bytes(b"env")
    with pytest.raises(ContractRevert) as caught:
        crucible.create_task(dev[0], TaskParams.model_construct(None, **values), model, env)
    assert (caught.value.name, caught.value.args_by_name) == (error, args)


def test_the_deterrence_twin_agrees_with_the_chain(crucible: Crucible, dev: list[Signer]) -> None:
    """`honest_majority` is Params.honestMajority bit for bit, the whole-game rule and the least dispute bond
    are the lens's `deterrenceOf` bit for bit, and the least slash the twin finds deters on chain while one wei
    less is refused. Broken version: make the twin count ties as honest (`2 * h >= per_check`) and the figures
    part at every even committee size; drop the finder's share from `majority` and the least slash deters off
    chain but not on it."""
    for colluding in (0, 1, 99_999, 250_000, 333_333, 499_999):
        for per_check in (1, 2, 3, 4, 7, 16):
            chain = crucible.chain.call(crucible.lens.functions.honestMajority(colluding, per_check))
            assert chain == honest_majority(colluding, per_check), (colluding, per_check)
    model, env = cid_of_bytes(b"model"), cid_of_bytes(b"env")
    base = demo_task_params(sample_rate_ppm=400_000, colluding_share_ppm=200_000, validators_per_check=4)
    least = least_deterrent_slash(
        base.sample_rate_ppm, 200_000, 4, base.finder_share_bps, base.max_reward_wei, base.max_fee_wei, 1
    )
    at_least = base.model_copy(update={"slash_wei": least, "min_trainer_stake_wei": least})
    at_least = at_least.model_copy(update={"dispute_bond_wei": at_least.least_dispute_bond_wei})
    chain_bond, chain_deters = crucible.chain.call(crucible.lens.functions.deterrenceOf(at_least.as_contract_tuple()))
    assert (chain_bond, chain_deters) == (at_least.least_dispute_bond_wei, True)
    assert at_least.deters and crucible.create_task(dev[0], at_least, model, env) > 0
    below = at_least.model_copy(update={"slash_wei": least - 1})
    assert not below.deters
    with pytest.raises(ContractRevert) as caught:
        crucible.create_task(dev[0], below, model, env)
    assert caught.value.name == "MarketDeterrenceTooLow"
    cheap = at_least.model_copy(update={"dispute_bond_wei": at_least.least_dispute_bond_wei - 1})
    with pytest.raises(ContractRevert) as caught:
        crucible.create_task(dev[0], cheap, model, env)
    assert caught.value.name == "MarketParameterBelow" and "disputeBond" in str(caught.value)
    # The most bond an honest appeal can carry (`most_dispute_bond`) is the chain's to the wei: one wei more is
    # refused by name, the bound itself accepted.
    most = at_least.most_dispute_bond_wei
    assert most is not None and most > at_least.least_dispute_bond_wei
    dear = at_least.model_copy(update={"dispute_bond_wei": most + 1})
    with pytest.raises(ContractRevert) as caught:
        crucible.create_task(dev[0], dear, model, env)
    assert caught.value.name == "MarketParameterAbove" and caught.value.args_by_name["most"] == most
    assert crucible.create_task(dev[0], at_least.model_copy(update={"dispute_bond_wei": most}), model, env) > 0


def test_reverted_view_decoded(crucible: Crucible) -> None:
    with pytest.raises(ContractRevert, match="MarketUnknownTask"):
        crucible.deadlines(7, 0)


def test_a_view_at_a_block_the_node_lacks_is_asked_again_until_it_has_it(crucible: Crucible) -> None:
    """Anvil answers BlockOutOfRangeError for a block past its head, as nodes do for a block a reorg or
    a revert took away while a role was asking (seen in the dispute test's re-rolls). Broken version that
    fails: `Chain.request` without the MISSING_BLOCK retry (the call raises Web3RPCError at once)."""
    chain = crucible.chain
    ahead = chain.w3.eth.block_number + 1
    timer = threading.Timer(0.3, lambda: chain.w3.provider.make_request("evm_mine", []))  # type: ignore[arg-type]
    timer.start()
    try:
        assert crucible.chain.call(crucible.market.functions.taskCount(), block=ahead) >= 0
    finally:
        timer.join()
    with pytest.raises(Exception, match="BlockOutOfRange"):  # a block that never comes: the node's own answer
        Chain(chain.rpc_url, retries=1, backoff_s=0.01).call(crucible.market.functions.taskCount(), block=ahead + 50)


def test_a_receipt_whose_block_a_reorg_removed_is_not_deep_enough(crucible: Crucible, dev: list[Signer]) -> None:
    """A reorg (or a devnet's evm_revert) can shorten the chain below a receipt's block while its sender
    waits: that receipt is stale, and the sender goes back to looking for the transaction instead of
    crashing on a block the node no longer has (a node process died of `BlockNotFound` that way in CI).
    Broken version: drop the `depth < 0` return and the `BlockNotFound` catch in `Sender.deep_enough` →
    this waits for its deadline and raises (or dies of BlockNotFound)."""
    receipt = crucible.transfer(dev[3], dev[8].address, 1)
    stale = {**receipt, "blockNumber": crucible.chain.block_number() + 1000}  # a block the chain lost
    started = time.monotonic()
    assert crucible.chain.sender.deep_enough(stale, time.monotonic() + 30) is False  # type: ignore[arg-type]
    assert time.monotonic() - started < 5, "answered at once, not at the deadline"


def test_a_transaction_the_node_dropped_is_sent_again_once(crucible: Crucible, dev: list[Signer]) -> None:
    """A reorg can drop a mined transaction from the chain and the pool; the sender notices it is unknown
    and resends the same signed bytes (same nonce: never twice). Broken version: drop the `_resend` of an
    unknown transaction in `Sender._await` → the transfer is never mined and the call fails after its timeout."""
    provider = crucible.chain.w3.provider
    recipient = dev[8].address
    before = crucible.balance_of(recipient)
    nonce = crucible.chain.w3.eth.get_transaction_count(dev[3].address)
    result: dict[str, object] = {}
    with manual_mining(crucible):
        sender = threading.Thread(target=lambda: result.update(receipt=crucible.transfer(dev[3], recipient, TOKEN)))
        sender.start()
        deadline = time.monotonic() + 30
        while not crucible.chain.w3.eth.get_block("pending")["transactions"] and time.monotonic() < deadline:
            time.sleep(0.05)
        (pending,) = crucible.chain.w3.eth.get_block("pending")["transactions"]
        provider.make_request("anvil_dropTransaction", [pending.to_0x_hex()])  # type: ignore[arg-type]
        assert not crucible.chain.w3.eth.get_block("pending")["transactions"]
        # The sender puts it back within its rebroadcast interval.
        while not crucible.chain.w3.eth.get_block("pending")["transactions"] and time.monotonic() < deadline:
            time.sleep(0.1)
        provider.make_request("evm_mine", [])  # type: ignore[arg-type]
        sender.join(30)
    assert result["receipt"]["status"] == 1  # type: ignore[index]
    assert crucible.balance_of(recipient) - before == TOKEN
    assert crucible.chain.w3.eth.get_transaction_count(dev[3].address) == nonce + 1


def test_transactions_a_revert_dropped_are_sent_again_before_the_next_one(
    crucible: Crucible, dev: list[Signer]
) -> None:
    """A reorg (here evm_revert) drops a transaction whose receipt was already returned; the sender's
    next transaction would take the nonce after it and never mine. The sender re-sends the dropped one
    from its signed bytes first. Broken version: make `_fill_gap` return at once → the second transfer
    is not mined in time and the call fails."""
    provider = crucible.chain.w3.provider
    recipient = dev[7].address
    before = crucible.balance_of(recipient)
    nonce = crucible.chain.w3.eth.get_transaction_count(dev[4].address)
    snapshot = provider.make_request("evm_snapshot", [])["result"]  # type: ignore[arg-type]
    crucible.transfer(dev[4], recipient, TOKEN)  # mined, receipt returned...
    provider.make_request("evm_revert", [snapshot])  # type: ignore[arg-type]
    assert crucible.chain.w3.eth.get_transaction_count(dev[4].address) == nonce  # ...and dropped
    crucible.transfer(dev[4], recipient, 2 * TOKEN)
    assert crucible.balance_of(recipient) - before == 3 * TOKEN  # both, once each
    assert crucible.chain.w3.eth.get_transaction_count(dev[4].address) == nonce + 2


def test_a_connection_reaches_the_chain_through_the_proxy_the_environment_names(
    anvil: LocalChain, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The connection's sessions read the environment's proxy settings once, when made, instead of at every
    request (protocol/chain/sessions.py), and still use them: with HTTP_PROXY naming a TCP forwarder in front
    of the Anvil, cutting the forwarder cuts the connection off. Broken version: sessions that stop trusting
    the environment without reading it first → requests go straight to the Anvil and the cut changes nothing."""
    proxy = TcpProxy(int(urlparse(anvil.rpc_url).port or 0))
    try:
        monkeypatch.setenv("HTTP_PROXY", proxy.url)
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        chain = Chain(anvil.rpc_url, retries=1, backoff_s=0.01)
        assert chain.block_number() >= 0
        proxy.cut()
        with pytest.raises(RpcUnreachable):
            chain.block_number()
    finally:
        proxy.cut()
