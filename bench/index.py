"""The auditor's event index: catch-up speed, a no-op sync, and a reorg repair, on a private Anvil.

A history of N `Staked` events (one account staking 1 token N times, one event per block) is
indexed from nothing; then a sync that finds nothing new; then a depth-10 reorg is repaired.

Run: .venv/bin/python -m bench.index [--events 2000] [--json]
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
import time
from pathlib import Path

from auditor.index import EventIndex
from protocol.accounts import load_signer
from protocol.chain import devnet
from protocol.chain.client import Crucible, Role
from protocol.chain.connection import Chain
from protocol.chain.deployment import deploy

TOKEN = 10**18


def measure(events: int) -> dict[str, object]:
    folder = Path(tempfile.mkdtemp(prefix="crucible-bench-index-"))
    node = devnet.start_private_chain(folder / "anvil.log")
    try:
        chain = Chain(node.rpc_url)
        dev = [load_signer(f"dev{i}") for i in range(10)]
        crucible = Crucible(chain, deploy(chain, dev[0], token_holders=(dev[1].address,), unbonding_period_s=120))
        crucible.ensure_allowance(dev[1], crucible.stakes.address, events * TOKEN)
        started = time.perf_counter()
        for _ in range(events):
            chain.transact(crucible.stakes.functions.stake(TOKEN, int(Role.TRAINER)), dev[1])
        made_s = time.perf_counter() - started

        # The same history indexed twice: one request per block header, then headers in batches.
        single = EventIndex(crucible, folder / "single.sqlite", header_batch=1)
        started = time.perf_counter()
        single.sync()
        single_s = time.perf_counter() - started
        single_rows = single.rows()
        single.close()
        index = EventIndex(crucible, folder / "index.sqlite")
        started = time.perf_counter()
        report = index.sync()
        catch_up_s = time.perf_counter() - started
        same_rows = index.rows() == single_rows
        started = time.perf_counter()
        noop = index.sync()
        noop_s = time.perf_counter() - started
        chain.w3.provider.make_request("anvil_reorg", [10, []])  # type: ignore[arg-type]
        started = time.perf_counter()
        repaired = index.sync()
        repair_s = time.perf_counter() - started
        rows = len(index.rows())
        index.close()
        return {
            "machine": f"{platform.machine()}, {platform.processor() or 'cpu'}, python {platform.python_version()}",
            "events_made": events,
            "make_history_s": round(made_s, 2),
            "blocks_indexed": report.to_block - report.from_block + 1,
            "events_indexed": report.events,
            "catch_up_one_header_per_request_s": round(single_s, 3),
            "events_per_s_one_header_per_request": round(report.events / single_s),
            "catch_up_batched_headers_s": round(catch_up_s, 3),
            "events_per_s_batched_headers": round(report.events / catch_up_s),
            "same_rows": same_rows,
            "noop_sync_ms": round(1000 * noop_s, 1),
            "noop_events": noop.events,
            "reorg_repair_ms": round(1000 * repair_s, 1),
            "reorged_from": repaired.reorged_from,
            "rows_after_reorg": rows,
        }
    finally:
        node.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=2000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = measure(args.events)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    for key, value in result.items():
        print(f"{key:>36}: {value}")


if __name__ == "__main__":
    main()
