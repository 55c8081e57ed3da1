"""A local IPFS daemon: js-ipfs (`ipfs` on npm, pinned in package.json), whose HTTP RPC mirrors Kubo's.

The tests start one per session (as they start Anvil), `crucible devnet up --ipfs` one beside the
devnet, and `crucible demo --store kubo` one for its run. Each runs offline (no bootstrap peers, no
MDNS, swarm on loopback: `init --profile test`) with its API, gateway and gRPC on ports of its own, so
several run side by side. Nothing here is js-ipfs-only but the binary: `KuboStore` speaks to any
daemon with the Kubo RPC API, a real Kubo included.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from protocol.chain.devnet import devnet_dir
from protocol.config import REPO_ROOT
from protocol.errors import ConfigError
from protocol.processes import free_port, process_alive, stop_child, stop_process

READY_TIMEOUT_S = 60.0


def jsipfs_binary() -> Path:
    """The js-ipfs command line from node_modules."""
    path = REPO_ROOT / "node_modules" / ".bin" / "jsipfs"
    if not path.exists():
        raise ConfigError(f"js-ipfs is not installed at {path}: run `make setup`")
    return path


def _environment(repo: Path) -> dict[str, str]:
    return {**os.environ, "IPFS_PATH": str(repo)}


def _configure(repo: Path, api_port: int) -> None:
    """Writes the daemon's three listening addresses into its repo's config (one file, no CLI round trips):
    the API on `api_port`, the gateway and gRPC (which nothing here uses) on free ports."""
    config_path = repo / "config"
    config = json.loads(config_path.read_text())
    config["Addresses"]["API"] = f"/ip4/127.0.0.1/tcp/{api_port}"
    config["Addresses"]["Gateway"] = f"/ip4/127.0.0.1/tcp/{free_port()}"
    config["Addresses"]["RPC"] = f"/ip4/127.0.0.1/tcp/{free_port()}"
    config_path.write_text(json.dumps(config, indent=2))


def wait_for_api(api_url: str, process: subprocess.Popen[bytes], log_path: Path) -> None:
    """Waits until the daemon's RPC API answers `id`; one line with the log's last words if it dies first."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            tail = log_path.read_text(errors="replace").strip().splitlines()[-1:] if log_path.exists() else []
            raise ConfigError(f"the IPFS daemon exited at start ({' '.join(tail) or 'no output'}); log: {log_path}")
        try:
            if httpx.post(f"{api_url}/api/v0/id", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    process.kill()
    raise ConfigError(f"the IPFS daemon did not answer at {api_url} within {READY_TIMEOUT_S:.0f} s; log: {log_path}")


def start_ipfs(repo: Path, api_port: int, log_path: Path, detach: bool = False) -> subprocess.Popen[bytes]:
    """Starts an offline daemon on the repo at `repo` (made on first use), its API on 127.0.0.1:`api_port`;
    returns once the API answers. A repo made earlier keeps what it held (pins included)."""
    binary = jsipfs_binary()
    if not (repo / "config").exists():
        repo.mkdir(parents=True, exist_ok=True)
        made = subprocess.run([str(binary), "init", "--profile", "test"], env=_environment(repo),
                              capture_output=True, text=True, timeout=120)  # fmt: skip
        if made.returncode != 0:
            raise ConfigError(f"cannot make an IPFS repo at {repo}: {made.stderr.strip()[-300:]}")
    _configure(repo, api_port)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    # A previous daemon killed outright leaves its lock behind; none runs on this repo now.
    shutil.rmtree(repo / "repo.lock", ignore_errors=True)  # a folder (js-ipfs locks with mkdir)
    with log_path.open("ab") as log:
        process = subprocess.Popen(
            [str(binary), "daemon", "--offline", "--enable-preload=false"],
            env=_environment(repo), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=detach,
        )  # fmt: skip
    wait_for_api(f"http://127.0.0.1:{api_port}", process, log_path)
    return process


@dataclass
class IpfsNode:
    """An IPFS daemon this process started (tests, the demo)."""

    api_url: str
    repo: Path
    process: subprocess.Popen[bytes]

    def stop(self) -> None:
        """Stops it and waits for it to exit."""
        stop_child(self.process)


def start_private_ipfs(folder: Path) -> IpfsNode:
    """Starts a daemon on free ports with its repo and log under `folder`."""
    api_port, repo = free_port(), folder / "ipfs-repo"
    process = start_ipfs(repo, api_port, folder / "ipfs.log")
    return IpfsNode(f"http://127.0.0.1:{api_port}", repo, process)


# The devnet's daemon: beside the background Anvil, its repo, log and pid under the devnet folder.


@dataclass(frozen=True)
class DevnetIpfs:
    """What `crucible devnet up --ipfs` / `devnet status` report of the devnet's IPFS daemon."""

    running: bool
    api_url: str | None
    pid: int | None
    repo: str


def _ipfs_pid_file() -> Path:
    return devnet_dir() / "ipfs.pid"


def devnet_ipfs_status() -> DevnetIpfs:
    """Whether the devnet's IPFS daemon runs, and where its API is."""
    repo = str(devnet_dir() / "ipfs-repo")
    path = _ipfs_pid_file()
    recorded = json.loads(path.read_text()) if path.exists() else None
    if recorded is None or not process_alive(int(recorded["pid"])):
        return DevnetIpfs(False, None, None, repo)
    return DevnetIpfs(True, f"http://127.0.0.1:{recorded['api_port']}", int(recorded["pid"]), repo)


def devnet_ipfs_up() -> DevnetIpfs:
    """Starts the devnet's IPFS daemon in the background unless it runs; its repo persists."""
    current = devnet_ipfs_status()
    if current.running:
        return current
    api_port = free_port()
    process = start_ipfs(devnet_dir() / "ipfs-repo", api_port, devnet_dir() / "ipfs.log", detach=True)
    _ipfs_pid_file().write_text(json.dumps({"pid": process.pid, "api_port": api_port}))
    return devnet_ipfs_status()


def devnet_ipfs_down() -> bool:
    """Stops the devnet's IPFS daemon; returns whether one ran."""
    current = devnet_ipfs_status()
    _ipfs_pid_file().unlink(missing_ok=True)
    if not current.running or current.pid is None:
        return False
    stop_process(current.pid)
    return True
