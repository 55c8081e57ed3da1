"""Integration helpers: Crucible roles run as real child processes, their JSON events read line by line."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from filelock import FileLock
from helpers.events import matches
from helpers.warm import WarmProcess

CRUCIBLE = str(Path(sys.executable).parent / "crucible")


class RoleProcess:
    """`crucible <role> run ...` as a child process (forked from the warm parent: helpers/warm.py); a thread
    collects its JSON events. With `kill_at=(name, fields)` that thread SIGKILLs the process the moment it
    reads that event, before the process can get much further (a test polling for the event would see it
    up to half a second late, by when a warm role may have finished the work it was to be killed in)."""

    def __init__(
        self,
        home: Path,
        rpc_url: str,
        book: Path,
        role: str,
        *args: str,
        key: str | None = None,
        kill_at: tuple[str, dict[str, Any]] | None = None,
    ) -> None:
        command = [CRUCIBLE, "--rpc", rpc_url, "--deployment", str(book), role, "run", *args, "--json", "--poll", "0.3"]
        env = {**os.environ, "CRUCIBLE_HOME": str(home)}
        if key is not None:
            env["CRUCIBLE_PRIVATE_KEY"] = key
        self.command = " ".join(args)
        self.kill_at = kill_at
        self.killed = threading.Event()
        self.process = WarmProcess(command, env)
        self.events: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            event = json.loads(line)
            if self.kill_at is not None and not self.killed.is_set() and matches(event, *self.kill_at):
                self.process.send_signal(signal.SIGKILL)
                self.killed.set()
            with self._lock:
                self.events.append(event)

    def seen(self, name: str, **fields: Any) -> list[dict[str, Any]]:
        """Events called `name` with these fields so far."""
        with self._lock:
            return [e for e in self.events if matches(e, name, fields)]

    def failed(self) -> str | None:
        """The process's stderr tail when it exited non-zero (and was not killed on purpose), else None."""
        code = self.process.poll()
        if code is None or code == 0 or self.killed.is_set():
            return None
        stderr = self.process.stderr.read() if self.process.stderr else ""
        return f"`{self.command}` exited {code}: {stderr[-8000:]}"

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
        self.process.wait()


class Roles:
    """The role processes a test started; all killed when the test ends."""

    def __init__(self, home: Path, rpc_url: str, book: Path) -> None:
        self.home, self.rpc_url, self.book = home, rpc_url, book
        self.started: list[RoleProcess] = []

    def start(
        self,
        role: str,
        *args: str,
        key: str | None = None,
        home: Path | None = None,
        kill_at: tuple[str, dict[str, Any]] | None = None,
    ) -> RoleProcess:
        """Starts `crucible <role> run ARGS --json` with CRUCIBLE_PRIVATE_KEY=key when given (in another
        state folder than the test's when `home` is given: its own store, journal and keys), SIGKILLed as soon
        as it reports `kill_at` when given (RoleProcess)."""
        process = RoleProcess(home or self.home, self.rpc_url, self.book, role, *args, key=key, kill_at=kill_at)
        self.started.append(process)
        return process

    def wait_for(self, what: str, condition: Any, timeout_s: float = 300, tick: Any = None) -> None:
        """Polls `condition()` until true (calling `tick()` between looks, when given); fails early,
        naming it, when a started process died."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if condition():
                return
            if tick is not None:
                tick()
            for process in self.started:
                failure = process.failed()
                if failure:
                    raise AssertionError(f"waiting for {what}: {failure}")
            time.sleep(0.5)
        raise AssertionError(f"timed out waiting for {what}")

    def kill(self, process: RoleProcess) -> None:
        """SIGKILLs a process on purpose (no longer watched for failure)."""
        process.stop()
        self.started.remove(process)

    def stop_all(self) -> None:
        for process in self.started:
            process.stop()


@pytest.fixture
def roles(crucible_home: Path, chain: Any, tmp_path: Path) -> Any:
    """Role processes on the test's chain and address book (the `deployment` fixture saves it)."""
    started = Roles(crucible_home, chain.rpc_url, tmp_path / "deployment.json")
    yield started
    started.stop_all()


def _run_cli(home: Path, *args: str) -> str:
    """`crucible ARGS` in state folder `home`; its stdout (the test fails, with its stderr, when it fails)."""
    done = subprocess.run([CRUCIBLE, *args], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "CRUCIBLE_HOME": str(home)})  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture(scope="session")
def shared_tiny_model(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> tuple[Path, Path, str]:
    """The tiny arithmetic model most integration tests train: `crucible model init` with a short warm-up (100
    steps: a few right answers in every batch), then `crucible model publish` into a store of its own. Made
    once for the whole run: the first worker to want it makes it, under a lock, in the folder every worker of
    this run shares (pytest-xdist's own pattern); the others find it there. Each made it once per test module
    before, eleven times a run at about 15 CPU s each. Gives the model's folder, the store and the CID."""
    root = tmp_path_factory.getbasetemp()
    shared = root if worker_id == "master" else root.parent
    folder = shared / "tiny-model"
    with FileLock(str(shared / "tiny-model.lock")):
        if not (folder / "cid").is_file():
            _run_cli(folder / "home", "model", "init", "--env", "arithmetic", "--out", str(folder / "tiny"),
                     "--steps", "100")  # fmt: skip
            cid = json.loads(_run_cli(folder / "home", "model", "publish", str(folder / "tiny"), "--json"))["cid"]
            (folder / "cid").write_text(cid)
    return folder / "tiny", folder / "home" / "store", (folder / "cid").read_text()


@pytest.fixture(scope="session")
def tiny_model(shared_tiny_model: tuple[Path, Path, str]) -> Path:
    """The shared tiny model's folder (a Hugging Face folder, as `crucible model init` writes it)."""
    return shared_tiny_model[0]


@pytest.fixture(scope="session")
def model_cid_factory(shared_tiny_model: tuple[Path, Path, str]) -> Callable[[Path], str]:
    """Puts the shared tiny model's checkpoint into a test's store (`CRUCIBLE_HOME/store`): the files
    `crucible model publish` wrote, each a blob named by its CID (the roles check every one against its CID
    when they read it). Returns the checkpoint's CID."""
    _, published, cid = shared_tiny_model

    def publish(crucible_home: Path) -> str:
        store = crucible_home / "store"
        store.mkdir(parents=True, exist_ok=True)
        for blob in published.iterdir():
            if blob.is_file() and not blob.name.startswith("."):
                shutil.copyfile(blob, store / blob.name)
        return cid

    return publish
