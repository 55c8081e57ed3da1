"""The README's CLI walk-through, run as written: the block under its `walk-through` marker, line by line,
in a fresh state folder on a devnet of its own. A line whose comment says "terminal of its own" runs in
the background; one that says "once the ROLE says EVENT" waits until that process has printed that event.
The only changes to the text: `--deployment` (so the repository's address book is left alone), a free
`--port` for `devnet up`, and `bafk...` read as the CID the `--json` line before it printed."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers.amounts import assert_amounts_in_wei

from protocol.processes import free_port

pytestmark = [pytest.mark.integration, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
CRUCIBLE = str(Path(sys.executable).parent / "crucible")
MARKER = "<!-- walk-through: run by tests/integration/test_readme.py -->"
WAIT_S = 300


@dataclass
class Line:
    text: str
    args: list[str]
    out: str | None  # `> FILE`
    background: bool
    wait_for: tuple[str, str] | None  # (role, event)


def walk_through(readme: Path) -> list[Line]:
    """The fenced block after the marker, as commands with what their comments ask."""
    text = readme.read_text()
    assert MARKER in text, f"{readme} lost its walk-through marker"
    block = text.split(MARKER, 1)[1].split("```", 2)[1]
    lines = []
    for raw in block.splitlines():
        command, _, comment = raw.partition(" #")
        if not command.strip():
            continue
        args = shlex.split(command)
        out = None
        if ">" in args:
            at = args.index(">")
            args, out = args[:at], args[at + 1]
        waited = re.search(r"once the (\w+) says (\w+)", comment)
        lines.append(
            Line(raw.strip(), args, out, "terminal of its own" in comment, waited.groups() if waited else None)  # type: ignore[arg-type]
        )
    return lines


def test_the_walk_through_parses_into_what_the_test_runs() -> None:
    """The parsing itself, so that a README edit that breaks it fails here with a clear message."""
    lines = walk_through(ROOT / "README.md")
    assert all(line.args[0] == "crucible" for line in lines), [line.text for line in lines]
    assert [line.args[1:3] for line in lines if line.background] == [["node", "run"], ["validator", "run"]]
    assert any(line.args[1:3] == ["devnet", "advance"] for line in lines), "the walk-through moves the clock"
    assert all(line.wait_for is None or line.wait_for[0] in ("node", "validator") for line in lines)
    assert lines[0].args[1:3] == ["devnet", "up"] and lines[-1].args[1:3] == ["devnet", "down"]


def test_the_readme_walk_through_runs_end_to_end(tmp_path: Path) -> None:
    home, book = tmp_path / "home", tmp_path / "home" / "deployment.json"
    env = {**os.environ, "CRUCIBLE_HOME": str(home)}
    placeholders: dict[str, str] = {}
    background: dict[str, tuple[subprocess.Popen[str], Path]] = {}
    outputs: dict[str, str] = {}
    try:
        for line in walk_through(ROOT / "README.md"):
            if line.wait_for is not None:
                _wait_for_event(*line.wait_for, background)
            args = [placeholders.get(arg, arg) for arg in line.args[1:]]
            if args[:2] == ["devnet", "up"]:
                args += ["--port", str(free_port())]
            command = [CRUCIBLE, "--deployment", str(book), *args]
            if line.background:
                log = tmp_path / f"{args[0]}.log"
                with log.open("w") as sink:
                    process = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT, text=True, env=env,
                                               cwd=tmp_path, stdin=subprocess.DEVNULL)  # fmt: skip
                background[args[0]] = (process, log)
                continue
            done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600,
                                  stdin=subprocess.DEVNULL)  # fmt: skip
            assert done.returncode == 0, f"{line.text}\n{done.stdout}\n{done.stderr}"
            if line.out is not None:
                (tmp_path / line.out).write_text(done.stdout)
            outputs[" ".join(args[:2])] = done.stdout
            if "--json" in args and "cid" in (document := json.loads(done.stdout)):
                placeholders["bafk..."] = document["cid"]
        for name, (process, log) in background.items():
            assert process.wait(timeout=WAIT_S) == 0, f"{name} run failed:\n{log.read_text()}"
    finally:
        for process, _ in background.values():
            if process.poll() is None:
                process.kill()
        subprocess.run([CRUCIBLE, "devnet", "down"], env=env, capture_output=True, timeout=60)

    # What each step promised, checked on what it printed.
    shown = outputs["task show"]
    assert "Round 0 (final)" in shown and "included" in shown and "rejected" not in shown, shown
    # The trained checkpoint, whole, as `model eval` takes it (task show printed only a digest before).
    assert re.search(r"^trained\s+baf\w+ \(agreed in round 0\)$", shown, re.MULTILINE), shown
    stake = json.loads(outputs["stake show"])
    assert (stake["staked_wei"], stake["locked_wei"]) == (str(1000 * 10**18), "0") and assert_amounts_in_wei(stake)
    money = json.loads(outputs["audit money"])
    assert money["balanced"] and money["market"]["balanced"] and money["difference_wei"] == "0"
    assert "Balanced to the wei" in (tmp_path / "audit.html").read_text()
    assert 0.0 <= json.loads(outputs["model eval"])["accuracy"] <= 1.0
    node_log = background["node"][1].read_text()
    assert re.search(r"node claimed amount=900 CRU", node_log), node_log  # 1,000 less the validators' 10 %


def _wait_for_event(role: str, event: str, background: dict[str, tuple[subprocess.Popen[str], Path]]) -> None:
    process, log = background[role]
    deadline = time.monotonic() + WAIT_S
    pattern = re.compile(rf"^\S+ {role} {event}\b", re.MULTILINE)
    while not pattern.search(log.read_text()):
        assert process.poll() is None, f"{role} exited before saying {event}:\n{log.read_text()}"
        assert time.monotonic() < deadline, f"{role} never said {event}:\n{log.read_text()}"
        time.sleep(0.5)
