"""Artifact benchmarks: hashing/verification throughput, and distributing a checkpoint to clients.

1. CID hashing and streaming verification (MB/s) against `sha256sum` of the same file, same run.
2. A checkpoint of --size-mib MiB (64 MiB safetensors shards) to --clients client processes on
   loopback, every relay capped at --rate-mbps MB/s: the origin alone, then the origin with
   --relays relays that follow it, all started together. Time per client and aggregate throughput.

Run: .venv/bin/python -m bench.artifacts [--size-mib 1024 --clients 8 --relays 3 --rate-mbps 40] (prints JSON)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import torch

from protocol.artifacts.cid import CHUNK_BYTES, CidVerifier, cid_of_file
from protocol.artifacts.manifest import save_state_dict
from protocol.artifacts.store import LocalStore
from protocol.chain.devnet import free_port

CRUCIBLE = str(Path(sys.executable).parent / "crucible")
CLIENT = """
import sys, time
from pathlib import Path
from protocol.artifacts.fetch import Fetcher
from protocol.artifacts.store import LocalStore
start = time.monotonic()
urls, store = sys.argv[3].split(","), LocalStore(Path(sys.argv[2]))
fetcher = Fetcher(urls, store, parallel=4, show_progress=False, absent_wait_s=600, order_seed=int(sys.argv[4]))
fetcher.fetch_manifest_tree(sys.argv[1])
print(time.monotonic() - start)
"""


def hashing(path: Path) -> dict[str, float]:
    size_mb = path.stat().st_size / 1e6
    start = time.monotonic()
    cid = cid_of_file(path)
    cid_s = time.monotonic() - start
    start = time.monotonic()
    verifier = CidVerifier(cid)
    with path.open("rb") as handle:
        while chunk := handle.read(CHUNK_BYTES):
            verifier.update(chunk)
    assert verifier.matches()
    verify_s = time.monotonic() - start
    start = time.monotonic()
    subprocess.run(["sha256sum", str(path)], check=True, capture_output=True)
    sha_s = time.monotonic() - start
    return {
        "size_mb": size_mb,
        "cid_mb_s": size_mb / cid_s,
        "verify_mb_s": size_mb / verify_s,
        "sha256sum_mb_s": size_mb / sha_s,
    }


def start_relay(store: Path, rate_mbps: float, follow: str | None = None) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    command = [
        CRUCIBLE,
        "relay",
        "serve",
        "--port",
        str(port),
        "--store",
        str(store),
        "--rate-limit-mbps",
        str(rate_mbps),
    ]
    if follow:
        command += ["--follow", follow]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return process, url
        except httpx.HTTPError:
            time.sleep(0.1)
    raise RuntimeError("relay did not start")


def distribute(
    work: Path, origin_store: Path, manifest: str, clients: int, relays: int, rate: float
) -> dict[str, object]:
    servers = []
    try:
        origin, origin_url = start_relay(origin_store, rate)
        servers.append(origin)
        urls = [origin_url]
        for index in range(relays):
            process, url = start_relay(work / f"relay{index}", rate, follow=origin_url)
            servers.append(process)
            urls.append(url)
        # SHARDCAST-style: with relays, clients pull from the relays and the origin feeds only them.
        sources = urls[1:] or urls
        start = time.monotonic()
        runs = [
            subprocess.Popen(
                [sys.executable, "-c", CLIENT, manifest, str(work / f"client{i}"), ",".join(sources), str(i)],
                stdout=subprocess.PIPE,
                text=True,
            )
            for i in range(clients)
        ]
        times = []
        for run in runs:
            out, _ = run.communicate(timeout=3600)
            if run.returncode != 0:
                raise RuntimeError("a client failed")
            times.append(float(out.strip().splitlines()[-1]))
        wall = time.monotonic() - start
    finally:
        for process in servers:
            process.send_signal(signal.SIGKILL)
            process.wait()
    return {"relays": relays, "client_s": sorted(times), "slowest_s": max(times), "wall_s": wall}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--size-mib", type=int, default=1024)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--relays", type=int, default=3)
    parser.add_argument("--rate-mbps", type=float, default=40.0)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="crucible-bench-", dir=os.environ.get("BENCH_DIR")) as tmp:
        work = Path(tmp)
        origin_store = LocalStore(work / "origin")
        numel = options.size_mib * 1024 * 1024 // 4
        generator = torch.Generator().manual_seed(0)
        tensors = {f"w{i:03d}": torch.randn(numel // 64, generator=generator) for i in range(64)}
        manifest = save_state_dict(tensors, origin_store)
        del tensors
        (origin_store.root / ".announcements").write_text(manifest + "\n")
        shard_bytes = max(p.stat().st_size for p in origin_store.root.iterdir() if p.is_file())
        sample = work / "sample.bin"
        with sample.open("wb") as handle:
            for shard in sorted(p for p in origin_store.root.iterdir() if p.is_file() and not p.name.startswith(".")):
                handle.write(shard.read_bytes())
        hashed = hashing(sample)
        sample.unlink()
        results = []
        for relays in (0, options.relays):
            results.append(
                distribute(
                    work / f"run{relays}", origin_store.root, manifest, options.clients, relays, options.rate_mbps
                )
            )
            shutil.rmtree(work / f"run{relays}", ignore_errors=True)
    total_mb = options.size_mib * 1.048576
    summary = {
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "checkpoint_mib": options.size_mib,
        "shard_bytes": shard_bytes,
        "clients": options.clients,
        "rate_mb_s": options.rate_mbps,
        "hashing": hashed,
        "runs": results,
        "verify_share_of_transfer": (total_mb / hashed["verify_mb_s"]) / results[0]["slowest_s"],  # type: ignore[operator]
        "aggregate_mb_s": [options.clients * total_mb / run["wall_s"] for run in results],  # type: ignore[operator]
    }
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
