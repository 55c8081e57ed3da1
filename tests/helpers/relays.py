"""`crucible relay serve` as a real child process on a free loopback port."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from protocol.processes import free_port

CRUCIBLE = str(Path(sys.executable).parent / "crucible")


class RelayProcess:
    """A relay serving `store`; `kill()` is a crash (SIGKILL), no chance to clean up."""

    def __init__(self, home: Path, store: Path, *options: str, prefix: tuple[str, ...] = ()) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.store = store
        env = {**os.environ, "CRUCIBLE_HOME": str(home)}
        command = [CRUCIBLE, *prefix, "relay", "serve", "--port", str(self.port), "--store", str(store), *options]
        self.process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.1)
        self.kill()
        raise RuntimeError("relay did not start")

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=10)
