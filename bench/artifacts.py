"""Artifact benchmarks: hashing/verification throughput, and distributing a checkpoint to clients.

1. CID hashing and streaming verification (MB/s) against `sha256sum` of the same file, same run.
2. A checkpoint of --size-mib MiB (64 MiB safetensors shards) to --clients client processes on
   loopback, every server's sending capped at --rate-mbps MB/s, in one run:
   - Crucible, the origin relay alone;
   - Crucible, the origin with --relays relays that follow it;
   - the same, the relays listing each other as peers (`--peer`);
   - shardcast 0.3.2 (Prime Intellect's), its origin with --relays middle nodes, the same bytes
     (the shards, concatenated: shardcast distributes one file) in shards of the same size.
   Each setup starts together; per client: wall time, and the time its verification took (each
   shard against its CID while it streams for Crucible; blake3 of the reassembled file, shardcast's
   one check, timed again after its run). Bytes the origin sent, read from its own counter.

Run: .venv/bin/pip install -e '.[bench]'  (shardcast; it downloads with wget, Debian's `wget`), then
.venv/bin/python -m bench.artifacts [--size-mib 1024 --clients 8 --relays 3 --rate-mbps 40] (prints JSON)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import statistics
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
from protocol.processes import free_port

CRUCIBLE = str(Path(sys.executable).parent / "crucible")
CLIENT = """
import sys, time
from pathlib import Path
from protocol.artifacts import cid as cids
from protocol.artifacts.fetch import Fetcher
from protocol.artifacts.store import LocalStore
hashing = [0.0]
update = cids.CidVerifier.update
def timed(self, chunk):
    began = time.perf_counter()
    update(self, chunk)
    hashing[0] += time.perf_counter() - began
cids.CidVerifier.update = timed
start = time.monotonic()
urls, store = sys.argv[3].split(","), LocalStore(Path(sys.argv[2]))
fetcher = Fetcher(urls, store, parallel=4, show_progress=False, absent_wait_s=600, order_seed=int(sys.argv[4]))
fetcher.fetch_manifest_tree(sys.argv[1])
print(time.monotonic() - start, hashing[0])
"""
# shardcast 0.3.2 probes each server by writing /tmp/dummy.bin and reads the distribution file through
# one path in its own install folder: processes started together race on both (one deletes what
# another is reading). Each process here gets paths of its own; nothing else of shardcast changes.
PRIVATE_PATHS = """
import pathlib, shardcast.client as shardcast_client
private = pathlib.Path(sys.argv[-1])
(private / "pkg").mkdir(parents=True, exist_ok=True)
shardcast_client.__file__ = str(private / "pkg" / "client.py")
def _path(*parts):
    return private / "dummy.bin" if parts == ("/tmp/dummy.bin",) else pathlib.Path(*parts)
shardcast_client.Path = _path
"""
# shardcast's servers are http.server's; this caps what each sends per second (one bucket per server,
# as --rate-limit-mbps does for a relay) and counts it, in a file beside its data.
SHARDCAST_SERVER = """
import sys, threading, time
import shardcast.server as server
rate, counter = float(sys.argv[1]), sys.argv[2]
lock, state = threading.Lock(), {"next": time.monotonic(), "sent": 0}
def copyfile(self, source, output):
    while chunk := source.read(1 << 20):
        with lock:
            now = time.monotonic()
            begin = max(now, state["next"])
            state["next"] = begin + len(chunk) / rate
        time.sleep(max(0.0, begin - now))
        output.write(chunk)
        with lock:
            state["sent"] += len(chunk)
            sent = state["sent"]
        with open(counter, "w") as handle:
            handle.write(str(sent))
server.ShardcastRequestHandler.copyfile = copyfile
role = sys.argv[3]
{PRIVATE_PATHS}

if role == "origin":
    from shardcast.origin_server import OriginServer
    origin = OriginServer(sys.argv[4], int(sys.argv[5]))
    origin.broadcast(sys.argv[6])
    print("ready", flush=True)
    threading.Event().wait()
else:
    from shardcast import middle_node
    sys.argv = ["shardcast-middle", "--upstream", sys.argv[4], "--data-dir", sys.argv[5], "--port", sys.argv[6],
                "--check-interval", "1", "--log-level", "WARNING"]
    middle_node.main()
""".replace("{PRIVATE_PATHS}", PRIVATE_PATHS)
SHARDCAST_CLIENT = """
import sys, time
from shardcast.client_node import ClientNode
from shardcast.utils import compute_checksum
{PRIVATE_PATHS}
start = time.monotonic()
client = ClientNode(sys.argv[1].split(","), sys.argv[2])
while "v1" not in client.list_available_versions():
    time.sleep(0.5)
out = client.download_version("v1", sys.argv[2] + "/file.bin")
wall = time.monotonic() - start
assert out is not None, "shardcast gave up"
began = time.perf_counter()
compute_checksum(out)
print(wall, time.perf_counter() - began)
""".replace("{PRIVATE_PATHS}", PRIVATE_PATHS)


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


def wait_for(url: str) -> None:
    for _ in range(300):
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{url} did not answer")


def start_relay(store: Path, port: int, rate_mbps: float, *options: str) -> subprocess.Popen[bytes]:
    command = [CRUCIBLE, "relay", "serve", "--port", str(port), "--store", str(store), "--rate-limit-mbps",
               str(rate_mbps), *options]  # fmt: skip
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for(f"http://127.0.0.1:{port}/healthz")
    return process


def run_clients(commands: list[list[str]]) -> tuple[list[float], list[float], float]:
    """Starts the client commands together; returns each one's wall time, verification time, and
    the wall time of them all."""
    start = time.monotonic()
    runs = [subprocess.Popen(command, stdout=subprocess.PIPE, text=True) for command in commands]
    times, verifying = [], []
    for run in runs:
        out, _ = run.communicate(timeout=3600)
        if run.returncode != 0:
            raise RuntimeError("a client failed")
        wall, hashed = out.strip().splitlines()[-1].split()
        times.append(float(wall))
        verifying.append(float(hashed))
    return times, verifying, time.monotonic() - start


def summary(
    setup: str, times: list[float], verifying: list[float], wall: float, origin_bytes: int
) -> dict[str, object]:
    return {
        "setup": setup,
        "client_s": sorted(round(t, 1) for t in times),
        "slowest_s": max(times),
        "median_s": statistics.median(times),
        "wall_s": wall,
        "origin_bytes": origin_bytes,
        "verify_share": statistics.mean(v / t for v, t in zip(verifying, times, strict=True)),
    }


def distribute_crucible(
    work: Path, origin_store: Path, manifest: str, clients: int, relays: int, rate: float, peers: bool = True
) -> dict[str, object]:
    """Crucible's relays: the origin alone (relays=0), or relays that follow it (and, with `peers`, list
    each other as peers)."""
    servers = []
    try:
        origin_port = free_port()
        servers.append(start_relay(origin_store, origin_port, rate))
        origin_url = f"http://127.0.0.1:{origin_port}"
        ports = [free_port() for _ in range(relays)]
        urls = [f"http://127.0.0.1:{port}" for port in ports]
        for index, port in enumerate(ports):
            listed = [option for url in urls if peers and url != urls[index] for option in ("--peer", url)]
            servers.append(start_relay(work / f"relay{index}", port, rate, "--follow", origin_url, *listed))
        # SHARDCAST-style: with relays, clients pull from the relays and the origin feeds only them.
        sources = urls or [origin_url]
        times, verifying, wall = run_clients(
            [[sys.executable, "-c", CLIENT, manifest, str(work / f"client{i}"), ",".join(sources), str(i)]
             for i in range(clients)]
        )  # fmt: skip
        origin_bytes = int(httpx.get(f"{origin_url}/healthz").json()["served_bytes"])
    finally:
        for process in servers:
            process.send_signal(signal.SIGKILL)
            process.wait()
    setup = "crucible, origin alone" if not relays else f"crucible, origin + {relays} relays"
    setup += " (peers)" if relays and peers else ""
    return summary(setup, times, verifying, wall, origin_bytes)


def distribute_shardcast(
    work: Path, checkpoint: Path, shard_bytes: int, clients: int, middles: int, rate: float
) -> dict[str, object]:
    """shardcast 0.3.2: its origin broadcasts the checkpoint's bytes, `middles` middle nodes follow it,
    clients download from the middle nodes."""
    import shardcast  # noqa: F401 (fails here, with pip's hint, when the bench extra is not installed)

    env = {**os.environ, "SHARDCAST_SHARD_SIZE": str(shard_bytes), "SHARDCAST_LOG_LEVEL": "WARNING"}
    servers: list[subprocess.Popen[bytes]] = []
    probe = os.urandom(1 << 20)  # shardcast's clients probe every server for data1.bin first
    try:
        origin_port = free_port()
        origin_dir = work / "origin"
        origin_dir.mkdir(parents=True)
        (origin_dir / "data1.bin").write_bytes(probe)
        origin_count = work / "origin.sent"
        servers.append(subprocess.Popen(
            [sys.executable, "-c", SHARDCAST_SERVER, str(rate * 1e6), str(origin_count), "origin", str(origin_dir),
             str(origin_port), str(checkpoint), str(work / "origin-private")],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        ))  # fmt: skip
        origin_url = f"http://127.0.0.1:{origin_port}"
        for _ in range(600):
            if (origin_dir / "distribution.txt").exists() and (origin_dir / "distribution.txt").read_text().strip():
                break
            time.sleep(0.2)
        wait_for(f"{origin_url}/data1.bin")
        urls = []
        for index in range(middles):
            port, folder = free_port(), work / f"middle{index}"
            folder.mkdir()
            (folder / "data1.bin").write_bytes(probe)
            servers.append(subprocess.Popen(
                [sys.executable, "-c", SHARDCAST_SERVER, str(rate * 1e6), str(work / f"middle{index}.sent"), "middle",
                 origin_url, str(folder), str(port), str(work / f"middle{index}-private")],
                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            ))  # fmt: skip
            urls.append(f"http://127.0.0.1:{port}")
            wait_for(f"{urls[-1]}/data1.bin")
        sources = urls or [origin_url]
        times, verifying, wall = run_clients(
            [[sys.executable, "-c", SHARDCAST_CLIENT, ",".join(sources), str(work / f"client{i}"),
              str(work / f"client{i}-private")] for i in range(clients)]
        )  # fmt: skip
        origin_bytes = int(origin_count.read_text()) if origin_count.exists() else 0
    finally:
        for process in servers:
            process.send_signal(signal.SIGKILL)
            process.wait()
    return summary(f"shardcast 0.3.2, origin + {middles} middle nodes", times, verifying, wall, origin_bytes)


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
        checkpoint = work / "checkpoint.bin"  # the shards, concatenated: what shardcast distributes
        with checkpoint.open("wb") as handle:
            for shard in sorted(p for p in origin_store.root.iterdir() if p.is_file() and not p.name.startswith(".")):
                handle.write(shard.read_bytes())
        hashed = hashing(checkpoint)
        results = []
        for relays, peers in ((0, False), (options.relays, False), (options.relays, True)):
            results.append(distribute_crucible(
                work / "run", origin_store.root, manifest, options.clients, relays, options.rate_mbps, peers
            ))  # fmt: skip
            shutil.rmtree(work / "run", ignore_errors=True)
        results.append(distribute_shardcast(
            work / "shardcast", checkpoint, shard_bytes, options.clients, options.relays, options.rate_mbps
        ))  # fmt: skip
    total_mb = options.size_mib * 1.048576
    print(json.dumps({
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "checkpoint_mib": options.size_mib,
        "shard_bytes": shard_bytes,
        "clients": options.clients,
        "rate_mb_s": options.rate_mbps,
        "hashing": hashed,
        "runs": results,
        "aggregate_mb_s": [options.clients * total_mb / run["wall_s"] for run in results],
    }, indent=2))  # fmt: skip


if __name__ == "__main__":
    main()
