"""A demo run's environment and the processes it started, scoped to one test: demos in other test workers run
at the same time."""

from __future__ import annotations

import os
from pathlib import Path


def demo_env(tmp_path: Path) -> dict[str, str]:
    """The environment of a test's demo: its own CRUCIBLE_HOME, and its own TMPDIR, under which the demo makes its
    run's folder (crucible-demo-*) and so names it on every child's command line."""
    scratch = tmp_path / "tmp"
    scratch.mkdir(exist_ok=True)
    return {**os.environ, "CRUCIBLE_HOME": str(tmp_path / "home"), "TMPDIR": str(scratch)}


def demo_processes(tmp_path: Path) -> list[str]:
    """Command lines of the processes the test's demo started (their state folder is a crucible-demo-* folder
    under the test's TMPDIR)."""
    found = []
    scope = str(tmp_path / "tmp")
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if "crucible-demo-" in command and scope in command:
            found.append(command)
    return found
