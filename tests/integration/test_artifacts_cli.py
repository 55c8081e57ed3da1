"""`crucible artifacts` as a user runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from protocol.artifacts.cid import cid_of_file

pytestmark = pytest.mark.integration
CRUCIBLE = str(Path(sys.executable).parent / "crucible")


def run(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CRUCIBLE_HOME": str(home)}
    return subprocess.run([CRUCIBLE, *args], capture_output=True, text=True, env=env, timeout=60)


def test_cid_put_get_pin_with_a_local_store(tmp_path: Path, crucible_home: Path) -> None:
    source = tmp_path / "weights.bin"
    source.write_bytes(os.urandom(600_000))
    v1 = json.loads(run(crucible_home, "artifacts", "cid", str(source), "--json").stdout)["cid"]
    v0 = json.loads(run(crucible_home, "artifacts", "cid", str(source), "--cid-version", "0", "--json").stdout)["cid"]
    assert v1 == cid_of_file(source) and v0.startswith("Qm") and v0 == cid_of_file(source, 0)
    store = tmp_path / "store"
    put = json.loads(run(crucible_home, "artifacts", "put", str(source), "--to", str(store), "--json").stdout)
    assert put == {"cid": v1} and (store / v1).read_bytes() == source.read_bytes()
    out = tmp_path / "copy.bin"
    got = run(crucible_home, "artifacts", "get", v1, "--from", str(store), "--out", str(out), "--json")
    assert got.returncode == 0 and out.read_bytes() == source.read_bytes()
    pinned = run(crucible_home, "artifacts", "pin", v1, "--store", str(store), "--json")
    assert json.loads(pinned.stdout) == {"cid": v1, "pinned": True}


def test_bad_artifact_input_is_one_line(tmp_path: Path, crucible_home: Path) -> None:
    store = tmp_path / "store"
    cases = [
        (("artifacts", "cid", str(tmp_path / "missing")), "no such file"),
        (("artifacts", "cid", "/etc/hostname", "--cid-version", "2"), "CID version must be 0 or 1"),
        (("artifacts", "get", "not-a-cid", "--from", str(store), "--out", str(tmp_path / "o")), "malformed CID"),
        (("artifacts", "get", "bafkreibm6jg3ux5qumhcn2b3flc3tyu6dmlb4xa7u5bf44yegnrjhc4yeq", "--from", str(store),
          "--out", str(tmp_path / "o")), "is not in the local store"),
        (("artifacts", "put", "/etc/hostname", "--to", f"{store},http://127.0.0.1:1"), "neither a local store"),
        (("artifacts", "pin", "bafkreibm6jg3ux5qumhcn2b3flc3tyu6dmlb4xa7u5bf44yegnrjhc4yeq", "--store", str(store)),
         "cannot pin"),
    ]  # fmt: skip
    for args, fragment in cases:
        done = run(crucible_home, *args)
        assert done.returncode == 1 and done.stdout == "", args
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and fragment in lines[0], (args, done.stderr)
    assert not (tmp_path / "o").exists()
