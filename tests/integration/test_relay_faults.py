"""A fetch routes around relays that misbehave: every kind of lying or failing HTTP server listed
first, a real relay process holding the true bytes listed after it.

Broken on purpose, these fail: ordering `RelayPool.choose` by throughput alone (dropping its
failures-in-this-fetch and demotion keys) asks the liar twice before the true relay, and
`liar.requests == 1` fails; removing the `_Cut` for a slow drip makes `drip` hang until the test's
timeout; dropping the bound check makes `endless-sized` stream until the timeout; keeping the partial
file on failure makes `test_nothing_left_behind_when_no_relay_has_the_bytes` fail.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from helpers.liars import MODES, LyingRelay
from helpers.relays import RelayProcess

from protocol.accounts import load_signer
from protocol.artifacts.cid import cid_of_bytes
from protocol.artifacts.fetch import Fetcher, upload
from protocol.artifacts.store import LocalStore
from protocol.errors import ArtifactError, SourcesUnreachable

pytestmark = pytest.mark.integration
CRUCIBLE = str(Path(sys.executable).parent / "crucible")
SIZE = 700_000
DATA = bytes((i * 7919 + i // 3) % 256 for i in range(SIZE))
CID = cid_of_bytes(DATA)
# Short limits, so that a stall or a drip is cut in seconds.
QUICK = {"stall_s": 2.0, "min_bytes_per_s": 100_000.0, "grace_s": 1.5, "busy_wait_s": 0.0}


@pytest.fixture(scope="module")
def good(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RelayProcess]:
    home = tmp_path_factory.mktemp("home")
    relay = RelayProcess(home, home / "relay")
    source = home / "data.bin"
    source.write_bytes(DATA)
    upload(relay.url, source, load_signer("dev1"))
    yield relay
    relay.kill()


@pytest.fixture
def liars() -> Iterator[Callable[[str], LyingRelay]]:
    started: list[LyingRelay] = []

    def start(mode: str) -> LyingRelay:
        started.append(LyingRelay(CID, DATA, mode))
        return started[-1]

    yield start
    for liar in started:
        liar.close()


# An endless body is cut at the CID's size when it is known; unsized, the bound is MAX_UNSIZED_BYTES
# (4 GiB), too big for a test: that case is left out, not skipped.
CASES = [(mode, sized) for mode in MODES for sized in (True, False) if sized or mode != "endless"]


@pytest.mark.parametrize(("mode", "sized"), CASES, ids=[f"{m}-{'sized' if s else 'unsized'}" for m, s in CASES])
def test_a_fetch_routes_around_a_misbehaving_relay(
    mode: str, sized: bool, good: RelayProcess, liars: Callable[[str], LyingRelay], tmp_path: Path
) -> None:
    liar = liars(mode)
    store = LocalStore(tmp_path / "store")
    fetcher = Fetcher([liar.url, good.url], store, show_progress=False, **QUICK)
    started = time.monotonic()
    report = fetcher.fetch(CID, SIZE if sized else None)
    assert store.get(CID) == DATA and report.relays == [good.url]
    assert liar.requests >= 1, "the liar, listed first, was asked first"
    if mode != "busy":
        assert report.failed[0] == liar.url, "what went wrong counted against the liar"
        assert fetcher.pool.scores[liar.url].demoted_until > time.monotonic()
    assert liar.requests == 1, "the liar was not asked again before the relay not yet tried"
    assert time.monotonic() - started < 15
    assert not store.partial_path(CID).exists()


def test_a_short_true_prefix_is_resumed_from_the_next_relay(
    good: RelayProcess, liars: Callable[[str], LyingRelay], tmp_path: Path
) -> None:
    liar = liars("short")  # a dying relay: its half is true
    fetcher = Fetcher([liar.url, good.url], LocalStore(tmp_path / "store"), show_progress=False, **QUICK)
    report = fetcher.fetch(CID, SIZE)
    assert report.resumed_from == SIZE // 2 and report.relays == [good.url]


def test_a_wrong_prefix_resumed_elsewhere_blames_nobody_and_starts_over(
    good: RelayProcess, liars: Callable[[str], LyingRelay], tmp_path: Path
) -> None:
    liar = liars("wrong-short")
    store = LocalStore(tmp_path / "store")
    fetcher = Fetcher([liar.url, good.url], store, show_progress=False, **QUICK)
    report = fetcher.fetch(CID, SIZE)
    assert store.get(CID) == DATA and report.relays == [good.url]
    assert report.failed == [liar.url], "the true relay is not blamed for the liar's prefix"
    assert fetcher.pool.scores[good.url].failures == 0


@pytest.mark.parametrize("modes", [("short", "wrong"), ("stall", "error", "drip")])
def test_nothing_left_behind_when_no_relay_has_the_bytes(
    modes: tuple[str, ...], liars: Callable[[str], LyingRelay], tmp_path: Path
) -> None:
    urls = [liars(mode).url for mode in modes]
    store = LocalStore(tmp_path / "store")
    fetcher = Fetcher(urls, store, show_progress=False, **QUICK)
    with pytest.raises((ArtifactError, SourcesUnreachable), match=f"could not (fetch|reach any relay for) {CID}"):
        fetcher.fetch(CID, SIZE)
    assert not store.has(CID) and not store.partial_path(CID).exists()


def test_the_cli_fails_in_one_line_and_writes_nothing(liars: Callable[[str], LyingRelay], tmp_path: Path) -> None:
    urls = ",".join(liars(mode).url for mode in ("short", "wrong", "error"))
    out = tmp_path / "out.bin"
    home = tmp_path / "home"
    done = subprocess.run(
        [CRUCIBLE, "artifacts", "get", CID, "--from", urls, "--out", str(out)],
        capture_output=True, text=True, env={**os.environ, "CRUCIBLE_HOME": str(home)}, timeout=120,
    )  # fmt: skip
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.startswith("error: could not fetch") and len(done.stderr.strip().splitlines()) == 1
    assert not out.exists() and not list((home / "store" / ".partial").glob("*"))


@pytest.mark.parametrize(
    ("argument", "message"),
    [("--from=ftp://relay.example", "is not a relay URL"), ("CID", "not a CID")],
)
def test_bad_relay_urls_and_cids_are_one_line(argument: str, message: str, tmp_path: Path) -> None:
    args = ["notacid", "--from", "http://127.0.0.1:9"] if argument == "CID" else [CID, argument]
    done = subprocess.run(
        [CRUCIBLE, "artifacts", "get", *args, "--out", str(tmp_path / "o")],
        capture_output=True, text=True, env={**os.environ, "CRUCIBLE_HOME": str(tmp_path)}, timeout=60,
    )  # fmt: skip
    assert done.returncode == 1 and message in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "o").exists()
