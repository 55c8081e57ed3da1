"""The demo's child processes: every role of a task as a `crucible` process on the private devnet,
with its own key and thread count, stopped all together when the demo ends or is interrupted."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from functools import partial
from pathlib import Path
from typing import Any

CRUCIBLE = str(Path(sys.executable).parent / "crucible")


class Children:
    """Child processes, all stopped when the demo ends or is interrupted. Each gets torch threads for its
    share of the cores: trainers work at the same time as each other (three with a thread per core each
    made a round's trainers 2.7x slower on 2 cores), validators after them, often one far more than the
    other (positions are drawn by stake), so each of those may use every core."""

    def __init__(self, home: Path, rpc_url: str, book: Path) -> None:
        self.home, self.rpc_url, self.book = home, rpc_url, book
        self.processes: list[tuple[str, subprocess.Popen[str]]] = []

    def start(
        self, label: str, args: list[str], key: str | None = None, threads: int = 1, core: int | None = None
    ) -> subprocess.Popen[str]:
        """Starts `crucible <args>` with its own log; `core` pins it to that CPU (None: any)."""
        env = {**os.environ, "CRUCIBLE_HOME": str(self.home), "OMP_NUM_THREADS": str(threads),
               # Large buffers (a model's tensors, a batch's logits) from mmap, given back when freed: glibc's
               # moving threshold otherwise keeps a trainer's freed peak, 1.5 GB of it with SmolLM2.
               "MALLOC_MMAP_THRESHOLD_": str(1 << 20)}  # fmt: skip
        if key is not None:
            env["CRUCIBLE_PRIVATE_KEY"] = key
        log = (self.home / "logs" / f"{label}.log").open("w")
        command = [CRUCIBLE, "--rpc", self.rpc_url, "--deployment", str(self.book), *args]
        pin = None if core is None else partial(os.sched_setaffinity, 0, {core})
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, text=True, env=env, preexec_fn=pin)
        self.processes.append((label, process))
        return process

    def events(self, label: str) -> list[dict[str, Any]]:
        """The JSON event lines a child (run with `--json`) wrote to its log so far."""
        found = []
        for line in (self.home / "logs" / f"{label}.log").read_text().splitlines():
            if line.startswith("{"):
                with contextlib.suppress(ValueError):
                    found.append(json.loads(line))
        return found

    def failed(self) -> str | None:
        """A child that exited non-zero, with its log's last line."""
        for label, process in self.processes:
            code = process.poll()
            if code not in (None, 0):
                lines = (self.home / "logs" / f"{label}.log").read_text().strip().splitlines()
                return f"{label} exited {code}: {lines[-1] if lines else 'no output'}"
        return None

    def stop_all(self) -> None:
        for _, process in self.processes:
            if process.poll() is None:
                process.terminate()
        for _, process in self.processes:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
