"""CPU of a contract view call, side by side in one run: `Chain.call` (the ABI work done once per function,
protocol/chain/views.py) against web3's own `ContractFunction.call()`, and a bare `eth_blockNumber` through the
connection's sessions (protocol/chain/sessions.py) against web3's default ones; on a private Anvil with freshly
deployed contracts.

Run: .venv/bin/python -m bench.views [--calls 300]   (docs/benchmarks.md)
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from web3 import Web3

from protocol.accounts import load_signer
from protocol.chain import devnet
from protocol.chain.client import Crucible
from protocol.chain.connection import Chain
from protocol.chain.deployment import deploy
from protocol.config import devnet_settings


def cpu_ms(run: Callable[[], Any], calls: int) -> float:
    """CPU milliseconds of one call, over `calls` calls after a first one."""
    run()
    started = time.process_time()
    for _ in range(calls):
        run()
    return round(1000 * (time.process_time() - started) / calls, 3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300)
    args = parser.parse_args()
    node = devnet.start_private_chain(Path(tempfile.mkdtemp()) / "anvil.log", block_time_s=1)
    try:
        chain = Chain(node.rpc_url, expected_chain_id=devnet_settings().chain_id)
        dev = [load_signer(f"dev{i}") for i in range(10)]
        crucible = Crucible(chain, deploy(chain, dev[0], token_holders=tuple(s.address for s in dev)))
        market, lens = crucible.market.functions, crucible.lens.functions
        views = {
            "taskCount() (one uint)": market.taskCount(),
            "getRound(1, 0) (a 21-field struct)": market.getRound(1, 0),
            "seatOf(1, dev1) (a struct)": market.seatOf(1, dev[1].address),
            "membersOf(1) (an array of structs)": market.membersOf(1),
            "honestMajority(333333, 3) (pure)": lens.honestMajority(333_333, 3),
        }
        default = Web3(Web3.HTTPProvider(node.rpc_url, {"timeout": 10}))  # requests reading the environment each time
        rows = [{
            "call": "eth_blockNumber (the request alone)",
            "web3_call_cpu_ms": cpu_ms(lambda: default.provider.make_request("eth_blockNumber", []), args.calls),  # type: ignore[arg-type]
            "chain_call_cpu_ms": cpu_ms(lambda: chain.w3.provider.make_request("eth_blockNumber", []), args.calls),  # type: ignore[arg-type]
        }]  # fmt: skip
        for name, function in views.items():
            rows.append({
                "call": name,
                "web3_call_cpu_ms": cpu_ms(lambda f=function: f.call(), args.calls),  # type: ignore[misc]
                "chain_call_cpu_ms": cpu_ms(lambda f=function: chain.call(f), args.calls),  # type: ignore[misc]
                "same_result": chain.call(function) == function.call(),
            })  # fmt: skip
        print(
            json.dumps({"machine": f"{platform.machine()}, one process", "calls": args.calls, "rows": rows}, indent=1)
        )
    finally:
        node.stop()


if __name__ == "__main__":
    main()
