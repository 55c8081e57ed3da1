"""Shared fixtures: a real Anvil on a free port, freshly deployed contracts, an isolated state folder."""

from __future__ import annotations

import json
import os
import resource
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.devnet import BLOCK_TIME_S

from protocol.accounts import Signer, load_signer
from protocol.artifacts.ipfs_node import IpfsNode, start_private_ipfs
from protocol.chain import devnet
from protocol.chain.client import Crucible
from protocol.chain.connection import Chain
from protocol.chain.deployment import Deployment, deploy
from protocol.chain.devnet import LocalChain
from protocol.config import devnet_settings

# The longest files first, by their time under `make test`: with `--no-loadscope-reorder` (Makefile)
# xdist hands whole files out in this order, so these start at once on different workers and the many
# short files fill in behind them. Its default order (most tests first) left them to the end, one
# worker busy for minutes while the others idled.
LONGEST_FIRST = ("test_validator.py", "test_audit.py", "test_demo.py", "test_readme.py", "test_lifecycle.py",
                 "test_faults.py")  # fmt: skip


def pytest_configure(config: pytest.Config) -> None:
    """One torch thread per process, in the workers and in every process a test starts (they inherit it),
    set before any test module imports torch: the suite runs three workers, each with its role processes,
    on two cores, and torch's OpenMP threads spin while they wait for a core. Three processes of small
    matrix products took 68 CPU s at two threads each and 11 at one. A test that means a thread count
    sets its own."""
    assert "torch" not in sys.modules, "torch was imported before the thread count was set"
    os.environ.setdefault("OMP_NUM_THREADS", "1")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Puts the files of LONGEST_FIRST first, in that order (a stable sort: each file's tests stay together)."""
    rank = {name: index for index, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


def _cpu_seconds() -> float:
    """CPU time of this worker and of the children it has waited for (role processes, Anvils)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    """With CRUCIBLE_TEST_CPU_LOG set, appends each test's wall and CPU seconds (setup to teardown) to
    that file as a JSON line: on two cores the suite is CPU-bound, and wall times under load hide
    which tests cost the most. `python -m bench.test_cpu FILE` sums them by file."""
    log = os.environ.get("CRUCIBLE_TEST_CPU_LOG")
    wall, cpu = time.monotonic(), _cpu_seconds()
    yield
    if log:
        wall, cpu = time.monotonic() - wall, _cpu_seconds() - cpu
        line = {"test": item.nodeid, "wall_s": round(wall, 2), "cpu_s": round(cpu, 2)}
        with open(log, "a") as out:
            out.write(json.dumps(line) + "\n")


@pytest.fixture(autouse=True)
def crucible_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test gets its own state folder (keystores, devnet files, local copies)."""
    home = tmp_path / "crucible-home"
    monkeypatch.setenv("CRUCIBLE_HOME", str(home))
    monkeypatch.delenv("CRUCIBLE_PRIVATE_KEY", raising=False)
    monkeypatch.delenv("CRUCIBLE_PASSWORD", raising=False)
    return home


@pytest.fixture(scope="session")
def anvil(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalChain]:
    """One real Anvil for the test session, on a free port, mining every `BLOCK_TIME_S` seconds."""
    node = devnet.start_private_chain(tmp_path_factory.mktemp("anvil") / "anvil.log", block_time_s=BLOCK_TIME_S)
    yield node
    node.stop()


@pytest.fixture(scope="session")
def ipfs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[IpfsNode]:
    """One real IPFS daemon (js-ipfs, offline) for the test session, on free ports; started on first use."""
    node = start_private_ipfs(tmp_path_factory.mktemp("ipfs"))
    yield node
    node.stop()


@pytest.fixture
def chain(anvil: LocalChain) -> Chain:
    """A fresh connection to the session's Anvil."""
    return Chain(anvil.rpc_url, expected_chain_id=devnet_settings().chain_id)


@pytest.fixture
def dev() -> list[Signer]:
    """Anvil's ten dev accounts as signers."""
    return [load_signer(f"dev{i}") for i in range(10)]


@pytest.fixture
def deployment(chain: Chain, dev: list[Signer], tmp_path: Path) -> Deployment:
    """Freshly deployed contracts (new addresses for every test), their address book saved."""
    result = deploy(chain, dev[0], token_holders=tuple(s.address for s in dev), unbonding_period_s=120)
    result.save(tmp_path / "deployment.json")
    return result


@pytest.fixture
def crucible(chain: Chain, deployment: Deployment) -> Crucible:
    """Typed access to the freshly deployed contracts."""
    return Crucible(chain, deployment)
