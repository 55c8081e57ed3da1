import json
import os
import random
import shutil
import subprocess
from pathlib import Path

import pytest

from protocol.artifacts.cid import CidVerifier, cid_of_bytes, cid_of_file, verify_bytes

KIB = 1024
SIZES = [0, 1, 256 * KIB, 256 * KIB + 1, 3 * 1024 * KIB + 7, 100 * 1024 * KIB]


def _ipfs_cid(path: Path) -> str:
    done = subprocess.run(["ipfs_cid", str(path)], capture_output=True, text=True, check=True, timeout=300)
    line = next(line for line in done.stdout.splitlines() if line.startswith("{"))
    return str(json.loads(line)["CIDv0"])


@pytest.mark.slow
@pytest.mark.parametrize("size", SIZES)
def test_cidv0_matches_debians_ipfs_cid(size: int, tmp_path: Path) -> None:
    """Debian's ipfs-cid is an independent implementation of Kubo's defaults (CIDv0, dag-pb leaves)."""
    if shutil.which("ipfs_cid") is None:
        pytest.skip("Debian's ipfs-cid is not installed (make test installs it with apt-get where it can)")
    path = tmp_path / "data"
    path.write_bytes(random.Random(size).randbytes(size))
    assert cid_of_file(path, version=0) == _ipfs_cid(path)


def test_known_kubo_cids() -> None:
    # `echo -n hello | ipfs add --only-hash [--cid-version 1]`
    assert cid_of_bytes(b"hello", 0) == "QmWfVY9y3xjsixTgbd9AorQxH7VtMpzfx2HaWtsoUYecaX"
    assert cid_of_bytes(b"hello", 1) == "bafkreibm6jg3ux5qumhcn2b3flc3tyu6dmlb4xa7u5bf44yegnrjhc4yeq"
    assert cid_of_bytes(b"", 1) == "bafkreihdwdcefgh4dqkjv67uzcmw7ojee6xedzdetojuzjevtenxquvyku"


def test_streaming_equals_one_shot_and_detects_any_change(tmp_path: Path) -> None:
    data = os.urandom(700 * KIB)
    path = tmp_path / "f"
    path.write_bytes(data)
    cid = cid_of_file(path)
    assert cid == cid_of_bytes(data) and cid.startswith("bafybei")  # several chunks: a dag-pb root
    verifier = CidVerifier(cid)
    for start in range(0, len(data), 100_000):
        verifier.update(data[start : start + 100_000])
    assert verifier.matches()
    flipped = bytearray(data)
    flipped[123_456] ^= 1
    assert not verify_bytes(bytes(flipped), cid)
    assert not verify_bytes(data[:-1], cid)
