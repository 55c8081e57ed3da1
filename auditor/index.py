"""An incremental SQLite index of the market's and the stake manager's events.

The chain stays the source of truth: the index holds only decoded logs (and the hashes of the
blocks it has seen), so it can be deleted and rebuilt at any time and gives the same rows.

- It resumes from the last block it indexed and only reads blocks `confirmations` deep.
- Before each sync it checks that the block it last indexed is still on the canonical chain; when
  not (a reorg), it walks back through the block hashes it kept to the newest block still
  canonical, deletes everything above, and indexes again from there.
- Each chunk of blocks is written in one SQLite transaction with the new tip: a crash leaves the
  index at a consistent block.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eth_utils import event_abi_to_log_topic
from hexbytes import HexBytes
from web3 import Web3

from protocol.chain.client import Crucible
from protocol.chain.ids import decode_submission_id
from protocol.config import crucible_home
from protocol.errors import ChainError, ConfigError

SCHEMA_VERSION = 1
CHUNK_BLOCKS = 2000
HEADER_BATCH = 200  # block headers asked for in one JSON-RPC batch (1: one request each)
KEEP_TIPS = 256  # block hashes kept without events, to find a common ancestor after a reorg

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS blocks (number INTEGER PRIMARY KEY, hash TEXT NOT NULL, timestamp INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS events (
    block INTEGER NOT NULL,
    log_index INTEGER NOT NULL,
    tx TEXT NOT NULL,
    contract TEXT NOT NULL,
    name TEXT NOT NULL,
    task INTEGER,
    round INTEGER,
    submission TEXT,
    account TEXT,
    args TEXT NOT NULL,
    PRIMARY KEY (block, log_index)
);
CREATE INDEX IF NOT EXISTS events_task ON events (task, name);
CREATE INDEX IF NOT EXISTS events_submission ON events (submission);
CREATE INDEX IF NOT EXISTS events_account ON events (account);
CREATE TABLE IF NOT EXISTS evaluations (
    checkpoint TEXT PRIMARY KEY, accuracy REAL NOT NULL, sampled_accuracy REAL NOT NULL, problems INTEGER NOT NULL
);
"""
# The address an event is about, for the per-account pages.
ACCOUNT_FIELDS = ("trainer", "validator", "creator", "disputer", "aggregator", "account", "operator")


@dataclass(frozen=True)
class Event:
    """One decoded log as indexed; `args` holds JSON values (bytes as 0x hex, big numbers as ints)."""

    block: int
    log_index: int
    tx: str
    contract: str
    name: str
    task: int | None
    round: int | None
    submission: int | None
    account: str | None
    args: dict[str, Any]
    timestamp: int

    def as_json(self) -> dict[str, Any]:
        """The event for JSON output; uint256 values become strings so no reader loses digits."""
        return {
            "block": self.block,
            "log_index": self.log_index,
            "tx": self.tx,
            "contract": self.contract,
            "event": self.name,
            "timestamp": self.timestamp,
            "args": {key: _json_safe(value) for key, value in self.args.items()},
        }


@dataclass(frozen=True)
class SyncReport:
    """What one sync did."""

    from_block: int
    to_block: int
    events: int
    reorged_from: int | None


def _json_safe(value: Any) -> Any:
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and abs(value) > 2**53:
        return str(value)
    if isinstance(value, dict):
        return {key: _json_safe(item) for key, item in value.items()}
    return value


def plain(value: Any) -> Any:
    """A decoded ABI value as JSON: bytes as 0x hex, structs as objects."""
    if isinstance(value, bytes | bytearray):
        return "0x" + bytes(value).hex()
    if isinstance(value, Mapping):
        return {str(key): plain(item) for key, item in value.items()}
    if hasattr(value, "_asdict"):
        return {str(key): plain(item) for key, item in value._asdict().items()}
    if isinstance(value, list | tuple):
        return [plain(item) for item in value]
    return value


def default_index_path(crucible: Crucible) -> Path:
    """The state folder's index of this deployment: `index/<chain id>-<market>.sqlite`."""
    return crucible_home() / "index" / f"{crucible.chain.chain_id}-{crucible.deployment.TaskMarket.lower()}.sqlite"


class EventIndex:
    """The events of one deployment in a SQLite file."""

    def __init__(
        self, crucible: Crucible, path: Path, confirmations: int = 0, header_batch: int = HEADER_BATCH
    ) -> None:
        if confirmations < 0:
            raise ConfigError(f"--confirmations must be 0 or more, got {confirmations}")
        self.crucible = crucible
        self.path = path
        self.confirmations = confirmations
        self.header_batch = max(1, header_batch)
        path.parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(path, timeout=30, check_same_thread=False)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.executescript(SCHEMA)
        self._topics = self._event_topics()
        self._check_meta()

    def close(self) -> None:
        """Closes the database."""
        self.db.close()

    # ------------------------------------------------------------ setup

    def _event_topics(self) -> dict[bytes, tuple[str, Any]]:
        topics: dict[bytes, tuple[str, Any]] = {}
        for label, contract in (("TaskMarket", self.crucible.market), ("StakeManager", self.crucible.stakes)):
            for abi in contract.abi:
                if abi["type"] == "event":
                    topic = bytes(event_abi_to_log_topic(abi))
                    topics[topic] = (label, contract.events[abi["name"]]())
        return topics

    def _check_meta(self) -> None:
        deployment = self.crucible.deployment
        wanted = {
            "schema_version": str(SCHEMA_VERSION),
            "chain_id": str(self.crucible.chain.chain_id),
            "market": deployment.TaskMarket.lower(),
            "stake_manager": deployment.StakeManager.lower(),
        }
        stored = dict(self.db.execute("SELECT key, value FROM meta").fetchall())
        for key, value in wanted.items():
            if key in stored and stored[key] != value:
                raise ConfigError(
                    f"the index {self.path} is of another deployment ({key} {stored[key]}, not {value}): "
                    "delete it or pass another --index"
                )
        with self.db:
            self.db.executemany("INSERT OR IGNORE INTO meta VALUES (?, ?)", wanted.items())
            self.db.execute("INSERT OR IGNORE INTO meta VALUES ('last_block', ?)", (str(deployment.deployBlock - 1),))

    @property
    def last_block(self) -> int:
        """The newest block indexed."""
        return int(self.db.execute("SELECT value FROM meta WHERE key = 'last_block'").fetchone()[0])

    # ------------------------------------------------------------ sync

    def sync(self, progress: Callable[[int, int], None] | None = None) -> SyncReport:
        """Indexes every confirmed block since the last sync, repairing a reorg first."""
        w3 = self.crucible.chain.w3
        reorged_from = self._repair()
        start = self.last_block + 1
        target = self._rpc(lambda: w3.eth.block_number) - self.confirmations
        count = 0
        block = start
        while block <= target:
            end = min(block + CHUNK_BLOCKS - 1, target)
            count += self._index_chunk(block, end)
            if progress is not None:
                progress(end - start + 1, target - start + 1)
            block = end + 1
        return SyncReport(start, max(target, start - 1), count, reorged_from)

    def _rpc(self, call: Callable[[], Any]) -> Any:
        return self.crucible.chain.request(call)

    def _block(self, number: int) -> Any:
        return self._rpc(lambda: self.crucible.chain.w3.eth.get_block(number))

    def _headers(self, numbers: list[int]) -> list[Any]:
        """Block headers, `header_batch` per JSON-RPC batch request."""
        if self.header_batch == 1:
            return [self._block(number) for number in numbers]
        w3 = self.crucible.chain.w3
        headers: list[Any] = []
        for start in range(0, len(numbers), self.header_batch):

            def batch(part: list[int] = numbers[start : start + self.header_batch]) -> list[Any]:
                with w3.batch_requests() as requests:
                    for number in part:
                        requests.add(w3.eth.get_block(number))
                    return list(requests.execute())

            headers += self._rpc(batch)
        return headers

    def _repair(self) -> int | None:
        """Returns the block the index was cut back to after a reorg, or None when none happened."""
        rows = self.db.execute("SELECT number, hash FROM blocks ORDER BY number DESC").fetchall()
        if not rows:
            return None
        head = self._rpc(lambda: self.crucible.chain.w3.eth.block_number)
        if rows[0][0] <= head and self._block(rows[0][0])["hash"].to_0x_hex() == rows[0][1]:
            return None  # the tip is canonical, so is everything below it
        ancestor = self.crucible.deployment.deployBlock - 1
        for number, stored_hash in rows[1:]:
            if number <= head and self._block(number)["hash"].to_0x_hex() == stored_hash:
                ancestor = number
                break
        with self.db:
            self.db.execute("DELETE FROM events WHERE block > ?", (ancestor,))
            self.db.execute("DELETE FROM blocks WHERE number > ?", (ancestor,))
            self.db.execute("UPDATE meta SET value = ? WHERE key = 'last_block'", (str(ancestor),))
        return ancestor

    def _index_chunk(self, start: int, end: int) -> int:
        w3 = self.crucible.chain.w3
        addresses = [self.crucible.market.address, self.crucible.stakes.address]
        logs = self._rpc(lambda: w3.eth.get_logs({"fromBlock": start, "toBlock": end, "address": addresses}))
        blocks = {
            int(header["number"]): (header["hash"].to_0x_hex(), int(header["timestamp"]))
            for header in self._headers(sorted({int(log["blockNumber"]) for log in logs} | {end}))
        }
        rows = []
        for log in logs:
            if HexBytes(log["blockHash"]).to_0x_hex() != blocks[int(log["blockNumber"])][0]:
                raise ChainError(f"the chain reorganised while block {log['blockNumber']} was read: sync again")
            rows.append(self._row(log))
        with self.db:
            self.db.executemany("INSERT OR REPLACE INTO events VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
            self.db.executemany(
                "INSERT OR REPLACE INTO blocks VALUES (?, ?, ?)", [(n, h, t) for n, (h, t) in blocks.items()]
            )
            self.db.execute("UPDATE meta SET value = ? WHERE key = 'last_block'", (str(end),))
            self.db.execute(
                "DELETE FROM blocks WHERE number < ? AND number NOT IN (SELECT block FROM events)", (end - KEEP_TIPS,)
            )
        return len(rows)

    def _row(self, log: Any) -> tuple[Any, ...]:
        label, event = self._topics[bytes(log["topics"][0])]
        decoded = event.process_log(log)
        args = {key: plain(value) for key, value in decoded["args"].items()}
        submission = args.get("submissionId")
        task, round_index = args.get("taskId"), args.get("round")
        if submission is not None:
            task, round_index, _ = decode_submission_id(int(submission))
        account = next((args[key] for key in ACCOUNT_FIELDS if key in args), None)
        return (
            int(log["blockNumber"]),
            int(log["logIndex"]),
            HexBytes(log["transactionHash"]).to_0x_hex(),
            label,
            decoded["event"],
            task,
            round_index,
            None if submission is None else str(submission),
            None if account is None else Web3.to_checksum_address(account),
            json.dumps(args, sort_keys=True),
        )

    # ------------------------------------------------------------ reading

    def events(
        self,
        name: str | None = None,
        task: int | None = None,
        round_index: int | None = None,
        submission: int | None = None,
        account: str | None = None,
    ) -> list[Event]:
        """Indexed events matching every filter given, oldest first."""
        clauses, values = [], []
        for column, value in (("name", name), ("task", task), ("round", round_index), ("account", account)):
            if value is not None:
                clauses.append(f"e.{column} = ?")
                values.append(value)
        if submission is not None:
            clauses.append("e.submission = ?")
            values.append(str(submission))
        where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
        query = (
            "SELECT e.block, e.log_index, e.tx, e.contract, e.name, e.task, e.round, e.submission, e.account, e.args,"
            f" b.timestamp FROM events e JOIN blocks b ON b.number = e.block {where} ORDER BY e.block, e.log_index"
        )
        found = []
        for row in self.db.execute(query, values):
            submission_value = None if row[7] is None else int(row[7])
            fields: list[Any] = [*row[:7], submission_value, row[8], json.loads(row[9]), row[10]]
            found.append(Event(*fields))
        return found

    def rows(self) -> list[tuple[Any, ...]]:
        """Every event row, in chain order: what a rebuild must reproduce."""
        return self.db.execute("SELECT * FROM events ORDER BY block, log_index").fetchall()

    def task_ids(self) -> list[int]:
        """Every task created, in order."""
        return [row[0] for row in self.db.execute("SELECT task FROM events WHERE name = 'TaskCreated' ORDER BY task")]

    # ------------------------------------------------------------ held-out evaluations (a cache)

    def evaluation(self, checkpoint: str) -> tuple[float, float] | None:
        """The cached held-out (greedy, sampled) accuracy of a checkpoint."""
        row = self.db.execute(
            "SELECT accuracy, sampled_accuracy FROM evaluations WHERE checkpoint = ?", (checkpoint,)
        ).fetchone()
        return None if row is None else (float(row[0]), float(row[1]))

    def record_evaluation(self, checkpoint: str, accuracy: float, sampled_accuracy: float, problems: int) -> None:
        """Caches a checkpoint's held-out accuracy (content-addressed, so it never changes)."""
        with self.db:
            self.db.execute(
                "INSERT OR REPLACE INTO evaluations VALUES (?, ?, ?, ?)",
                (checkpoint, accuracy, sampled_accuracy, problems),
            )


@contextmanager
def open_index(crucible: Crucible, path: Path | None = None, confirmations: int = 0) -> Iterator[EventIndex]:
    """An index (the state folder's by default), closed afterwards."""
    index = EventIndex(crucible, path or default_index_path(crucible), confirmations)
    try:
        yield index
    finally:
        index.close()
