"""Fetching from relays: parallel, throughput-ranked, verified while streaming, resumable.

Every download goes to `<store>/.partial/<cid>` while it is hashed; only bytes that hash to the
CID are moved into the store. A relay whose bytes do not match (corrupted, truncated) is demoted
and the partial file discarded; a relay that fails mid-transfer leaves the partial file to be
resumed, with a `Range` request, from the next relay (or by the next run after a crash, which
re-hashes what is there first).
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from eth_account.messages import encode_defunct
from rich.progress import BarColumn, DownloadColumn, Progress, TaskID, TransferSpeedColumn

from protocol.accounts import Signer
from protocol.artifacts.cid import CHUNK_BYTES, CidVerifier, cid_of_file
from protocol.artifacts.manifest import Manifest, parse_manifest
from protocol.artifacts.store import LocalStore, safe_cid
from protocol.artifacts.upload import upload_message
from protocol.errors import ArtifactError, ConfigError, LocalCopyDamaged, OwnFault, SourcesUnreachable

DEMOTE_S = 60.0
# Marks an attempt that got no answer about the bytes (the relay could not be reached, or the transfer
# broke off): it says nothing of whether the relay holds them.
NO_ANSWER = " (no answer)"
EWMA = 0.3


@dataclass
class RelayScore:
    """What the client has measured of one relay."""

    url: str
    throughput_bps: float | None = None
    failures: int = 0
    demoted_until: float = 0.0
    active: int = 0


@dataclass
class FetchReport:
    """How one CID was fetched."""

    cid: str
    size: int
    relays: list[str] = field(default_factory=list)
    resumed_from: int = 0
    rejected: list[str] = field(default_factory=list)


class RelayPool:
    """Picks relays: untried first, then by measured throughput shared among active transfers."""

    def __init__(self, urls: Iterable[str]) -> None:
        self.scores = {url.rstrip("/"): RelayScore(url.rstrip("/")) for url in urls}
        if not self.scores:
            raise ConfigError("no relay given")
        self.lock = threading.Lock()

    def choose(self, avoid: set[str]) -> str | None:
        now = time.monotonic()
        with self.lock:
            candidates = [s for s in self.scores.values() if s.url not in avoid]
            if not candidates:
                return None
            healthy = [s for s in candidates if s.demoted_until <= now] or candidates

            def rank(score: RelayScore) -> float:
                if score.throughput_bps is None:
                    return float("inf")
                return score.throughput_bps / (score.active + 1)

            best = max(healthy, key=rank)
            best.active += 1
            return best.url

    def done(self, url: str, nbytes: int, seconds: float) -> None:
        with self.lock:
            score = self.scores[url]
            score.active -= 1
            if nbytes and seconds > 0:
                measured = nbytes / seconds
                previous = score.throughput_bps
                score.throughput_bps = measured if previous is None else (1 - EWMA) * previous + EWMA * measured

    def failed(self, url: str, demote: bool) -> None:
        with self.lock:
            score = self.scores[url]
            score.active -= 1
            score.failures += 1
            if demote:
                score.demoted_until = time.monotonic() + DEMOTE_S


class Fetcher:
    """Fetches CIDs from relays into a LocalStore."""

    def __init__(
        self,
        urls: Iterable[str],
        store: LocalStore,
        parallel: int = 4,
        show_progress: bool = True,
        absent_wait_s: float = 0.0,
        order_seed: int | None = None,
    ) -> None:
        """`absent_wait_s`: how long to keep asking when no relay has a CID yet (relays still mirroring).
        `order_seed`: fetch a manifest's shards in an order shuffled by this seed, so that relays and
        clients that start together spread over different shards instead of all wanting the same one."""
        self.pool = RelayPool(urls)
        self.absent_wait_s = absent_wait_s
        self.order_seed = order_seed
        self.store = store
        self.parallel = parallel
        self.http = httpx.Client(timeout=httpx.Timeout(30.0, connect=5.0))
        self._tasks: dict[str, TaskID] = {}
        self.progress = (
            Progress("[progress.description]{task.description}", BarColumn(), DownloadColumn(), TransferSpeedColumn())
            if show_progress
            else None
        )

    def fetch(self, cid: str) -> FetchReport:
        """Fetches one CID (unless the store has it) and returns how.

        When no relay delivers the true bytes, who is at fault decides the error: if some relay
        answered (not found, wrong bytes, an HTTP error) the bytes are unavailable: ArtifactError, the
        publisher's fault. If none could even be reached (connection refused, timed out, cut mid-way)
        nothing is known of the bytes: SourcesUnreachable, the fetcher's own fault."""
        cid = safe_cid(cid)
        if self.store.has(cid):
            return FetchReport(cid, self.store.size_of(cid))
        report = FetchReport(cid, 0)
        reasons: list[str] = []
        give_up_at = time.monotonic() + self.absent_wait_s
        while True:
            avoid: set[str] = set()
            absent: set[str] = set()
            for _ in range(3 * len(self.pool.scores)):
                url = self.pool.choose(avoid)
                if url is None:
                    break
                outcome = self._attempt(url, cid, report)
                if outcome == "done":
                    return report
                reasons.append(f"{url}: {outcome}")
                if outcome in ("absent", "bad bytes"):
                    avoid.add(url)
                if outcome == "absent":
                    absent.add(url)
            if not absent or time.monotonic() >= give_up_at:
                break
            time.sleep(0.5)
        shown = "; ".join(reasons[-len(self.pool.scores) :] or ["no relay"])
        if all(reason.endswith(NO_ANSWER) for reason in reasons):
            raise SourcesUnreachable(f"could not reach any relay for {cid}: {shown}")
        raise ArtifactError(f"could not fetch {cid}: {shown}")

    def _attempt(self, url: str, cid: str, report: FetchReport) -> str:
        partial = self.store.partial_path(cid)
        verifier = CidVerifier(cid)
        offset = partial.stat().st_size if partial.exists() else 0
        if offset:
            with partial.open("rb") as handle:
                while chunk := handle.read(CHUNK_BYTES):
                    verifier.update(chunk)
        headers = {"Range": f"bytes={offset}-"} if offset else {}
        started = time.monotonic()
        received = 0
        try:
            with self.http.stream("GET", f"{url}/ipfs/{cid}", headers=headers) as response:
                if response.status_code == 404:
                    self.pool.failed(url, demote=False)
                    return "absent"
                if response.status_code == 416 or response.status_code not in (200, 206):
                    self.pool.failed(url, demote=True)
                    return f"HTTP {response.status_code}"
                if offset and response.status_code == 200:
                    # The relay ignored the range: start over.
                    offset, verifier = 0, CidVerifier(cid)
                    partial.unlink(missing_ok=True)
                if offset and not report.resumed_from:
                    report.resumed_from = offset
                with partial.open("ab") as handle:
                    for chunk in response.iter_bytes(CHUNK_BYTES):
                        handle.write(chunk)
                        verifier.update(chunk)
                        received += len(chunk)
                        self._advance(cid, len(chunk))
        except (httpx.ConnectError, httpx.ConnectTimeout):
            self.pool.failed(url, demote=True)
            return f"unreachable{NO_ANSWER}"
        except httpx.HTTPError:
            self.pool.failed(url, demote=True)
            return f"transfer failed, kept for resume{NO_ANSWER}"
        except OSError as error:
            self.pool.failed(url, demote=False)
            raise OwnFault(f"cannot write the download of {cid} to {partial}: {error.strerror}") from None
        if not verifier.matches():
            partial.unlink(missing_ok=True)
            self.pool.failed(url, demote=True)
            report.rejected.append(url)
            return "bad bytes"
        self.store.install_verified_file(cid, partial)
        self.pool.done(url, received, time.monotonic() - started)
        report.size = verifier.size
        report.relays.append(url)
        return "done"

    def _advance(self, cid: str, nbytes: int) -> None:
        if self.progress is not None and cid in self._tasks:
            self.progress.advance(self._tasks[cid], nbytes)

    def fetch_many(self, cids: list[str], sizes: dict[str, int] | None = None) -> list[FetchReport]:
        """Fetches CIDs in parallel, with a progress bar when enabled."""
        self._tasks = {}
        if self.progress is not None:
            self.progress.start()
            for cid in cids:
                self._tasks[cid] = self.progress.add_task(cid[:16], total=(sizes or {}).get(cid))
        try:
            with ThreadPoolExecutor(max_workers=self.parallel) as workers:
                return list(workers.map(self.fetch, cids))
        finally:
            if self.progress is not None:
                self.progress.stop()

    def fetch_manifest_tree(self, cid: str) -> Manifest:
        """Fetches a manifest and all its shards (each verified) into the store."""
        self.fetch(cid)
        manifest = parse_manifest(self.store.get(cid), cid)
        shards = [shard.cid for shard in manifest.shards]
        if self.order_seed is not None:
            random.Random(self.order_seed).shuffle(shards)
        self.fetch_many(shards, {s.cid: s.size for s in manifest.shards})
        return manifest


def upload(url: str, path: Path, signer: Signer, expiry_s: int = 600, timeout_s: float = 120.0) -> str:
    """Uploads a file to a relay, signed by `signer`; returns its CID."""
    cid = cid_of_file(path)
    size = path.stat().st_size
    expiry = int(time.time()) + expiry_s
    signature = signer.sign_message(encode_defunct(text=upload_message(cid, size, expiry)))
    headers = {
        "X-Crucible-Address": signer.address,
        "X-Crucible-Expiry": str(expiry),
        "X-Crucible-Signature": signature,
        "Content-Length": str(size),
    }

    def body() -> Iterable[bytes]:
        with path.open("rb") as handle:
            while chunk := handle.read(CHUNK_BYTES):
                yield chunk

    try:
        response = httpx.put(f"{url.rstrip('/')}/ipfs/{cid}", content=body(), headers=headers, timeout=timeout_s)
    except httpx.HTTPError as error:
        raise ArtifactError(f"upload to {url} failed: {error}") from None
    if response.status_code != 200:
        try:
            reason = response.json().get("error", response.text)
        except ValueError:
            reason = response.text
        raise ArtifactError(f"relay {url} refused the upload ({response.status_code}): {reason}")
    return cid


class RelayStore:
    """The Store interface over relays: `put` uploads (signed) to every relay, `get` fetches
    (verified) into a local cache, `has` asks each relay, `pin` checks some relay holds it."""

    def __init__(self, urls: Iterable[str], cache: LocalStore, signer: Signer | None = None) -> None:
        self.urls = [url.rstrip("/") for url in urls]
        self.cache = cache
        self.signer = signer
        self.fetcher = Fetcher(self.urls, cache, show_progress=False)

    def put(self, data: bytes) -> str:
        """Uploads to every relay; succeeds when at least one took it (a relay that is down or refuses
        must not stop a node mid-round). Each relay that did not take it is a warning line on stderr."""
        if self.signer is None:
            raise ConfigError("uploading to relays needs an account to sign with")
        cid = self.cache.put(data)
        errors = []
        for url in self.urls:
            try:
                upload(url, self.cache.path_for(cid), self.signer)
            except ArtifactError as error:
                errors.append(str(error))
        if len(errors) == len(self.urls):
            raise ArtifactError("; ".join(errors))
        for missed in errors:
            logging.getLogger("crucible.relays").warning("warning: %s (other relays took %s)", missed, cid)
        return cid

    def get(self, cid: str) -> bytes:
        """The bytes of `cid` from the local cache, fetched (verified) when missing. A cached copy found
        damaged is set aside by the cache and fetched again by CID, once."""
        self.fetcher.fetch(cid)
        try:
            return self.cache.get(cid)
        except LocalCopyDamaged as error:
            logging.getLogger("crucible.relays").warning("warning: %s; fetching it again", error)
        self.fetcher.fetch(cid)
        return self.cache.get(cid)

    def has(self, cid: str) -> bool:
        cid = safe_cid(cid)
        for url in self.urls:
            try:
                if httpx.head(f"{url}/ipfs/{cid}", timeout=10).status_code == 200:
                    return True
            except httpx.HTTPError:
                continue
        return False

    def pin(self, cid: str) -> None:
        # Relays keep what they hold; pinning there means making sure one does.
        if not self.has(cid):
            raise ArtifactError(f"no relay holds {cid}")
