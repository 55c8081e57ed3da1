"""The event index on a real Anvil: resumes, waits for its confirmation depth, repairs reorgs, and a
rebuild from nothing gives the same rows."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from helpers.browser import browser_page, explorer_process, screenshot

from auditor.audit import Auditor
from auditor.index import EventIndex
from explorer.app import Syncer
from protocol.accounts import Signer
from protocol.artifacts.cid import cid_of_bytes
from protocol.artifacts.store import LocalStore
from protocol.chain.client import Crucible, Role
from protocol.chain.params import demo_task_params
from protocol.ml.envs.spec import default_spec

pytestmark = pytest.mark.integration
TOKEN = 10**18


def rebuilt_rows(crucible: Crucible, path: Path) -> list[tuple[object, ...]]:
    index = EventIndex(crucible, path)
    index.sync()
    rows = index.rows()
    index.close()
    return rows


def names(index: EventIndex) -> list[str]:
    return [event.name for event in index.events()]


def test_the_index_resumes_and_a_rebuild_gives_the_same_rows(
    crucible: Crucible, dev: list[Signer], tmp_path: Path
) -> None:
    index = EventIndex(crucible, tmp_path / "index.sqlite")
    first = index.sync()
    assert names(index) == ["MarketBound"]
    crucible.stake(dev[1], 10 * TOKEN, Role.TRAINER)
    crucible.stake(dev[2], 10 * TOKEN, Role.VALIDATOR)
    index.close()

    # A new process opening the same file resumes after the last indexed block.
    index = EventIndex(crucible, tmp_path / "index.sqlite")
    second = index.sync()
    assert second.from_block == first.to_block + 1 and second.events == 2
    assert names(index) == ["MarketBound", "Staked", "Staked"]
    staked = index.events("Staked", account=dev[2].address)
    assert len(staked) == 1 and staked[0].args["amount"] == 10 * TOKEN and staked[0].args["role"] == int(Role.VALIDATOR)
    assert index.sync().events == 0  # nothing new: nothing added twice
    # The chain is the source of truth: a rebuild from nothing gives exactly the same rows.
    assert rebuilt_rows(crucible, tmp_path / "rebuilt.sqlite") == index.rows()
    index.close()


def test_the_index_waits_for_its_confirmation_depth(crucible: Crucible, dev: list[Signer], tmp_path: Path) -> None:
    index = EventIndex(crucible, tmp_path / "index.sqlite", confirmations=3)
    crucible.stake(dev[3], 10 * TOKEN, Role.TRAINER)
    index.sync()
    assert "Staked" not in names(index)  # mined, but not 3 blocks deep yet
    for _ in range(3):
        crucible.chain.w3.provider.make_request("evm_mine", [])  # type: ignore[arg-type]
    index.sync()
    assert names(index).count("Staked") == 1
    index.close()


def test_a_reorg_that_drops_events_is_repaired(crucible: Crucible, dev: list[Signer], tmp_path: Path) -> None:
    """Broken version to check this test: make `_repair` return None at once → the dropped Staked event
    stays in the index and the rows differ from the rebuild."""
    index = EventIndex(crucible, tmp_path / "index.sqlite")
    crucible.stake(dev[4], 10 * TOKEN, Role.TRAINER)
    index.sync()
    before = len(index.rows())
    crucible.stake(dev[5], 10 * TOKEN, Role.VALIDATOR)  # approve + stake: two blocks
    index.sync()
    assert len(index.rows()) == before + 1 and index.events("Staked", account=dev[5].address)
    head = crucible.chain.w3.eth.block_number
    # Replace the last two blocks with empty ones: dev5's stake is no longer on the chain.
    crucible.chain.w3.provider.make_request("anvil_reorg", [2, []])  # type: ignore[arg-type]
    assert crucible.chain.w3.eth.block_number == head
    report = index.sync()
    assert report.reorged_from is not None and report.reorged_from < head
    assert not index.events("Staked", account=dev[5].address)
    assert len(index.rows()) == before
    assert rebuilt_rows(crucible, tmp_path / "rebuilt.sqlite") == index.rows()
    index.close()


def test_an_index_of_another_deployment_is_refused(crucible: Crucible, tmp_path: Path) -> None:
    import sqlite3

    from protocol.errors import ConfigError

    EventIndex(crucible, tmp_path / "index.sqlite").close()
    with sqlite3.connect(tmp_path / "index.sqlite") as db:
        db.execute("UPDATE meta SET value = '0x0000000000000000000000000000000000000001' WHERE key = 'market'")
    with pytest.raises(ConfigError, match="another deployment"):
        EventIndex(crucible, tmp_path / "index.sqlite")


def test_one_tasks_unreadable_model_leaves_the_explorer_serving_the_others(
    crucible: Crucible,
    dev: list[Signer],
    crucible_home: Path,
    model_cid_factory: Callable[[Path], str],
    tmp_path: Path,
) -> None:
    """Two tasks, one created (forced past `task create`'s check) on a model CID no store serves: the
    explorer's sync keeps the index current and evaluates the sound task's model, and warns about the
    other on that task's pages only. Broken version: let `Syncer.sync_once` evaluate every task inside
    one try (the old loop) → `syncer.error` is set and every page shows it."""
    store = LocalStore(crucible_home / "store")
    spec = default_spec("arithmetic")
    spec.eval_size = 4
    env_cid = store.put(spec.canonical_bytes())
    sound_model = model_cid_factory(crucible_home)
    params = demo_task_params(rounds=1)
    sound = crucible.create_task(dev[0], params, sound_model, env_cid)
    stranded = crucible.create_task(dev[0], params, cid_of_bytes(b"bytes nobody serves"), env_cid)
    auditor = Auditor(crucible, EventIndex(crucible, crucible_home / "explorer.sqlite"), store, rerun=False)
    syncer = Syncer(lambda: auditor, every_s=1, evaluate=True)
    try:
        syncer.sync_once(auditor)
        assert syncer.error is None, syncer.error
        assert set(syncer.task_warnings) == {stranded}
        assert "cannot be evaluated" in syncer.task_warnings[stranded]
        assert auditor.index.evaluation(sound_model) is not None, "the sound task's model was evaluated"
        assert sound in auditor.index.task_ids()
    finally:
        auditor.index.close()
    # The same through `crucible explorer serve` and a browser: the warning on the stranded task's page,
    # none on the sound task's.
    book = tmp_path / "deployment.json"
    with explorer_process(crucible_home, crucible.chain.rpc_url, book) as url:
        deadline = time.monotonic() + 120
        while not httpx.get(f"{url}/api/tasks/{stranded}", timeout=30).json()["warning"]:
            assert time.monotonic() < deadline, "the explorer never warned about the stranded task"
            time.sleep(0.5)
        assert httpx.get(f"{url}/api/tasks/{sound}", timeout=30).json()["warning"] is None
        with browser_page() as page:
            page.goto(f"{url}/tasks/{stranded}")
            assert "cannot be evaluated" in page.locator(".warn").inner_text()
            screenshot(page, "explorer-6-task-warning")
            page.goto(f"{url}/tasks/{sound}")
            assert page.locator(".warn").count() == 0 and page.locator("h1").inner_text() == f"Task {sound}"
