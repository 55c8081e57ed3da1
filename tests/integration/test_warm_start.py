"""The tests' warm parent (tests/helpers/warm.py) gives what a freshly started `crucible` gives: the same exit
code, stdout and stderr for the same command, the caller's environment and folder, and signals that reach the
child. Shown failing on a broken version: leaving out the caller's environment (`os.environ.update` in the
zygote's `become`) fails the state-folder check; leaving the child's stdio as the zygote's (no `dup2`) fails
the comparison with a fresh process."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from helpers.warm import WarmProcess, run_crucible

from protocol.processes import free_port

pytestmark = [pytest.mark.integration]
CRUCIBLE = str(Path(sys.executable).parent / "crucible")


@pytest.mark.parametrize(
    "args",
    [
        ["--version"],
        ["task", "show", "abc"],
        ["--rpc", "not-a-url", "task", "list"],
        ["stake", "deposit", "-1", "--role", "trainer"],
        ["model", "init", "--env", "chess", "--out", "m"],
        ["env", "spec", "arithmetic", "--json"],
    ],
)
def test_a_warm_child_answers_as_a_fresh_process_does(
    args: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = {**os.environ, "CRUCIBLE_HOME": str(tmp_path / "home")}
    fresh = subprocess.run([CRUCIBLE, *args], capture_output=True, text=True, env=env, timeout=120, cwd=tmp_path)
    monkeypatch.chdir(tmp_path)
    warm = run_crucible([CRUCIBLE, *args], env, timeout=120)
    assert (warm.returncode, warm.stdout, warm.stderr) == (fresh.returncode, fresh.stdout, fresh.stderr)


def test_a_warm_child_has_the_callers_state_folder_and_dies_by_the_signal_sent(tmp_path: Path) -> None:
    home = tmp_path / "elsewhere"
    done = run_crucible([CRUCIBLE, "account", "new", "probe", "--json"], {**os.environ, "CRUCIBLE_HOME": str(home),
                        "CRUCIBLE_PASSWORD": "x" * 12}, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["name"] == "probe"
    assert any(home.rglob("*probe*")), "the keystore is not in the state folder the caller named"
    # A command that runs until it is stopped: a relay, killed once it serves.
    port = free_port()
    relay = WarmProcess([CRUCIBLE, "relay", "serve", "--port", str(port), "--store", str(tmp_path / "store")],
                        {**os.environ, "CRUCIBLE_HOME": str(home)})  # fmt: skip
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and relay.poll() is None:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                break
        time.sleep(0.1)
    assert relay.poll() is None, relay.stderr.read()
    relay.send_signal(signal.SIGKILL)
    assert relay.wait(timeout=30) == -signal.SIGKILL
