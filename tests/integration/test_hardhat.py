"""The second EVM client: a whole round on Hardhat's node (EDR) with one-second blocks, `devnet up --client`, and
an OP Stack chain's L1 data fee (Hardhat's `op` chain type).

Anvil runs every other test; this file is what keeps "any EVM chain" from meaning "Anvil": the chain layer's
devnet calls (setBalance, the clock, traces of failed transactions) and its revert decoding run against a
second implementation of the EVM and its JSON-RPC.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from eth_account import Account
from helpers.demo import demo_env, demo_processes

from protocol.accounts import Signer
from protocol.chain import devnet
from protocol.chain.client import Crucible
from protocol.chain.connection import Chain
from protocol.chain.deployment import Deployment
from protocol.errors import InsufficientFunds
from protocol.processes import free_port

pytestmark = [pytest.mark.integration, pytest.mark.slow]
CRUCIBLE = str(Path(sys.executable).parent / "crucible")
MODEL_CID = (
    "bafkreigh2akiscaildcqabsyg3dfr6chu3fgpregiymsck7e7aqa4s52zy"  # a task plan that cannot fetch it still prices
)


def test_a_round_on_hardhat_pays_the_honest_slashes_the_cheat_and_balances(tmp_path: Path) -> None:
    """One round on Hardhat, a block a second: an honest trainer and a cheat (inflated rewards), one validator,
    settle, claim, then the auditor's money check. Broken version: make `devnet.dev_method` answer `anvil_…`
    whatever the node → Hardhat refuses anvil_setBalance and the demo stops with one line, exit 1."""
    env = demo_env(tmp_path)
    done = subprocess.run([CRUCIBLE, "demo", "--client", "hardhat", "--model", "tiny", "--rounds", "1",
                           "--trainers", "2", "--validators", "1", "--warmup-steps", "20", "--eval-problems", "20",
                           "--json"], capture_output=True, text=True, env=env, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout)
    assert summary["chain"]["client"] == "hardhat"
    assert summary["chain"]["client_version"].startswith("HardhatNetwork/"), summary["chain"]
    wei = {a["name"]: {k: int(v) for k, v in a.items() if k.endswith("_wei")} for a in summary["accounts"]}
    cheat = wei["trainer-2 (inflated-rewards)"]
    assert cheat["rewards_wei"] == 0 and cheat["stake_after_wei"] == cheat["stake_before_wei"] - 500 * 10**18
    honest = wei["trainer-1"]
    assert honest["rewards_wei"] > 0 and honest["stake_after_wei"] == honest["stake_before_wei"]
    # The validator's check fee (10 % of the 1,000 bounty) and the finder's half of the slash.
    assert wei["validator-1"]["rewards_wei"] >= (100 + 250) * 10**18
    assert summary["money_check"]["balanced"] is True and summary["money_check"]["difference_wei"] == "0"
    assert summary["money_check"]["market"]["balanced"] is True
    assert demo_processes(tmp_path) == []


def _crucible(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CRUCIBLE_HOME": str(home)}
    return subprocess.run([CRUCIBLE, *args], capture_output=True, text=True, env=env, timeout=120)


def test_devnet_up_on_hardhat_mines_on_its_interval_and_refuses_what_it_cannot_run(tmp_path: Path) -> None:
    """`devnet up --client hardhat`: Hardhat's node, a block a second, the contracts deployed; a devnet on
    another client or chain type while it runs, an unknown client, an OP chain on Anvil: one line, exit 1,
    nothing started or written."""
    home, book = tmp_path / "home", tmp_path / "31337.json"
    port = str(free_port())
    for args, fragment in [
        (["--client", "geth"], "--client must be one of anvil, hardhat, not 'geth'"),
        (["--chain-type", "op"], "--chain-type op runs on Hardhat only"),
        (["--client", "hardhat", "--chain-type", "zk"], "--chain-type must be one of l1, op"),
    ]:
        refused = _crucible(home, "--deployment", str(book), "devnet", "up", "--port", port, *args)
        lines = refused.stderr.strip().splitlines()
        assert refused.returncode == 1 and len(lines) == 1 and fragment in lines[0], refused.stderr
        assert not (home / "devnet").exists() and not book.exists()
    up = _crucible(home, "--deployment", str(book), "devnet", "up", "--client", "hardhat", "--port", port, "--json")
    assert up.returncode == 0, up.stderr
    try:
        started = json.loads(up.stdout)
        assert (started["client"], started["chain_type"], started["deployed"]) == ("hardhat", "l1", True)
        chain = Chain(started["rpc_url"])
        assert chain.client_version().startswith("HardhatNetwork/")
        assert chain.has_code(started["addresses"]["TaskMarket"])
        first = chain.block_number()
        time.sleep(3.5)
        assert 2 <= chain.block_number() - first <= 5, "not a block a second"
        other = _crucible(home, "--deployment", str(book), "devnet", "up", "--port", port)
        assert other.returncode == 1 and "the devnet runs on hardhat (l1)" in other.stderr, other.stderr
        status = json.loads(_crucible(home, "devnet", "status", "--json").stdout)
        assert (status["running"], status["client"]) == (True, "hardhat")
    finally:
        down = _crucible(home, "devnet", "down", "--json")
    assert json.loads(down.stdout)["stopped"] is True


def test_an_op_chain_shows_budgets_and_plans_the_l1_data_fee(tmp_path: Path, anvil: devnet.LocalChain) -> None:
    """On Hardhat's OP Stack chain (non-zero L1 fee parameters): a command that sends says what its transactions
    paid, L1 data fee included; `task plan` prices a round with it; a sender who can pay the L2 gas but not the
    L1 fee is refused before anything is sent. On a chain without the oracle, asking for L1 fees is one line,
    exit 1. Broken version: drop the L1 term from `Sender._budget` → the approve below is sent."""
    home, book = tmp_path / "home", tmp_path / "31337.json"
    port = str(free_port())
    up = _crucible(home, "--deployment", str(book), "devnet", "up", "--client", "hardhat", "--chain-type", "op",
                   "--port", port, "--json")  # fmt: skip
    assert up.returncode == 0, up.stderr
    try:
        started = json.loads(up.stdout)
        assert started["chain_type"] == "op" and int(started["l1_fee_params"]["l1_base_fee_wei"]) > 0
        staked = _crucible(home, "--deployment", str(book), "stake", "deposit", "100", "--role", "trainer",
                           "--account", "dev1", "--yes")  # fmt: skip
        assert staked.returncode == 0, staked.stderr
        fees = [line for line in staked.stderr.splitlines() if line.startswith("fees: ")]
        assert len(fees) == 1 and "fees: 2 transactions" in fees[0] and "L1 data fee" in fees[0], staked.stderr
        options = ["--env", "arithmetic", "--bounty", "100", "--rounds", "2", "--skip-availability-check"]
        planned = _crucible(home, "--deployment", str(book), "task", "plan", "--model", MODEL_CID, *options, "--json")
        assert planned.returncode == 0, planned.stderr
        cost = json.loads(planned.stdout)["cost"]
        assert cost["l1_data_fee"] == "charged by this chain" and int(cost["l1_data_fee_per_round_wei"]) > 0
        assert int(cost["round_cost_wei"]) == int(cost["l2_fee_per_round_wei"]) + int(cost["l1_data_fee_per_round_wei"])
        assert int(cost["trainers_cost_per_round_wei"]) + int(cost["validators_cost_per_round_wei"]) == int(
            cost["round_cost_wei"]
        )

        # A dear L1 (1,000,000 gwei): the smallest transaction's L1 fee is ~0.0084 ETH, its L2 gas ~0.0002.
        raised = _crucible(home, "devnet", "l1-fee", "--l1-base-fee-gwei", "1000000", "--json")
        assert raised.returncode == 0 and json.loads(raised.stdout)["l1_base_fee_wei"] == str(10**15), raised.stderr
        chain = Chain(started["rpc_url"])
        crucible = Crucible(chain, Deployment.load(book))
        account = Account.create()
        poor = Signer(account.address, "poor", account)
        devnet.set_balance(chain, poor.address, 10**15)  # 0.001 ETH: the L2 gas, not the L1 fee
        approve = crucible.token.functions.approve(crucible.stakes.address, 1)
        # Hardhat's estimate counts the L1 fee in the upfront cost and refuses: one line, not a "revert".
        with pytest.raises(InsufficientFunds, match="enough funds"):
            chain.transact(approve, poor)
        # With its gas limit given (no estimate), the budget is all that stands between it and the node.
        with pytest.raises(InsufficientFunds, match="L1 data fee"):
            chain.transact(approve, poor, gas=60_000)
        assert chain.w3.eth.get_transaction_count(poor.address) == 0  # nothing sent
    finally:
        _crucible(home, "devnet", "down")
    refused = _crucible(home, "--rpc", anvil.rpc_url, "devnet", "l1-fee")
    lines = refused.stderr.strip().splitlines()
    assert refused.returncode == 1 and len(lines) == 1 and "has no OP Stack GasPriceOracle" in lines[0], refused.stderr
