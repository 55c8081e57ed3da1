"""The event index on a real Anvil: resumes, waits for its confirmation depth, repairs reorgs, and a
rebuild from nothing gives the same rows."""

from __future__ import annotations

from pathlib import Path

import pytest

from auditor.index import EventIndex
from protocol.accounts import Signer
from protocol.chain.client import Crucible, Role

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
