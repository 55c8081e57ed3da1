"""Fetching from relays: parallel, throughput-ranked, verified while streaming, resumable, and
routed around relays that misbehave.

Every download goes to `<store>/.partial/<cid>` while it is hashed; only bytes that hash to the
CID are moved into the store. Each attempt asks one relay; what goes wrong counts against that
relay at once and the next attempt goes to another one:

- not found (404) or busy (503, 429): no fault; asked again after the others, while waiting is
  allowed;
- an HTTP error, a body that ends short of its length, a stall (no byte for `stall_s`), a slow drip
  (under `min_bytes_per_s` once `grace_s` has passed), a range it was not asked for, more bytes
  than the CID can have: a failure, and the relay is retried only after every other relay;
- bytes that do not hash to the CID: a failure too, and the partial file is discarded. Bytes are
  verifiable only whole (a shard's CID covers all of it), so when a download was resumed from
  another relay's bytes and does not verify, nobody is blamed: it starts again from zero.

A transfer that breaks off leaves its bytes for the next relay (or the next run, after a crash,
which re-hashes them first) to resume from with a `Range` request. The fetch succeeds as long as
any listed relay holds the true bytes; when none does it fails with one line and removes what it
had downloaded.
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
# The most bytes a CID fetched without a known size may have (a relay streaming without end stops here).
MAX_UNSIZED_BYTES = 4 * 1024**3
# Tries per relay in one fetch before it gives up on that relay.
TRIES_PER_RELAY = 2


@dataclass
class RelayScore:
    """What the client has measured of one relay."""

    url: str
    throughput_bps: float | None = None
    failures: int = 0
    demoted_until: float = 0.0
    active: int = 0
    last_resort: bool = False


@dataclass
class FetchReport:
    """How one CID was fetched."""

    cid: str
    size: int
    relays: list[str] = field(default_factory=list)
    resumed_from: int = 0
    rejected: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)


@dataclass
class Attempt:
    """What one request to one relay came to."""

    outcome: str  # done, absent, busy, failed, bad bytes, unverifiable
    reason: str = ""
    no_answer: bool = False


class RelayPool:
    """Picks relays: those that failed least in this fetch first, then last-resort ones (an origin
    a relay falls back to) after the others, then healthy before demoted, then untried, then by
    measured throughput shared among active transfers."""

    def __init__(self, urls: Iterable[str], last_resort: Iterable[str] = ()) -> None:
        self.scores = {url.rstrip("/"): RelayScore(url.rstrip("/")) for url in urls}
        for url in last_resort:
            self.scores.setdefault(url.rstrip("/"), RelayScore(url.rstrip("/"))).last_resort = True
        if not self.scores:
            raise ConfigError("no relay given")
        self.lock = threading.Lock()

    def choose(self, avoid: set[str], failed_here: dict[str, int] | None = None) -> str | None:
        now = time.monotonic()
        failed_here = failed_here or {}
        with self.lock:
            candidates = [s for s in self.scores.values() if s.url not in avoid]
            if not candidates:
                return None

            def order(score: RelayScore) -> tuple[int, bool, bool, float]:
                speed = float("inf") if score.throughput_bps is None else score.throughput_bps / (score.active + 1)
                return (failed_here.get(score.url, 0), score.last_resort, score.demoted_until > now, -speed)

            best = min(candidates, key=order)
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

    def released(self, url: str) -> None:
        """The attempt ended without a verdict on the relay (not found, busy)."""
        with self.lock:
            self.scores[url].active -= 1

    def failed(self, url: str) -> None:
        """The attempt failed: counted against the relay, which is demoted for a while."""
        with self.lock:
            score = self.scores[url]
            score.active -= 1
            score.failures += 1
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
        last_resort: Iterable[str] = (),
        stall_s: float = 20.0,
        min_bytes_per_s: float = 32 * 1024,
        grace_s: float = 10.0,
        busy_wait_s: float = 120.0,
    ) -> None:
        """`absent_wait_s`: how long to keep asking when no relay has a CID yet (relays still mirroring).
        `order_seed`: fetch a manifest's shards in an order shuffled by this seed, so that relays and
        clients that start together spread over different shards instead of all wanting the same one.
        `last_resort`: relays asked only when no other relay delivers (a relay's origin, behind its peers).
        `stall_s`, `min_bytes_per_s`, `grace_s`: a transfer with no byte for `stall_s`, or slower than
        `min_bytes_per_s` on average once `grace_s` has passed, is cut and counted against its relay.
        `busy_wait_s`: how long to keep asking when every relay that has a CID is busy."""
        self.pool = RelayPool(urls, last_resort)
        self.absent_wait_s = absent_wait_s
        self.busy_wait_s = busy_wait_s
        self.order_seed = order_seed
        self.store = store
        self.parallel = parallel
        self.min_bytes_per_s = min_bytes_per_s
        self.grace_s = grace_s
        self.http = httpx.Client(timeout=httpx.Timeout(stall_s, connect=5.0))
        self._tasks: dict[str, TaskID] = {}
        self.progress = (
            Progress("[progress.description]{task.description}", BarColumn(), DownloadColumn(), TransferSpeedColumn())
            if show_progress
            else None
        )

    def fetch(self, cid: str, size: int | None = None) -> FetchReport:
        """Fetches one CID (unless the store has it) and returns how. `size`, when known (a manifest
        lists its shards' sizes), bounds what a relay may send.

        When no relay delivers the true bytes, who is at fault decides the error: if some relay
        answered (not found, wrong bytes, an HTTP error) the bytes are unavailable: ArtifactError, the
        publisher's fault. If none could even be reached (connection refused, timed out, cut mid-way)
        nothing is known of the bytes: SourcesUnreachable, the fetcher's own fault. Either way the
        partial download is removed."""
        cid = safe_cid(cid)
        if self.store.has(cid):
            return FetchReport(cid, self.store.size_of(cid))
        report = FetchReport(cid, 0)
        attempts: list[tuple[str, Attempt]] = []
        failed_here: dict[str, int] = {}
        sources: list[str] = []  # who wrote the partial file's bytes, in this run
        started = time.monotonic()
        while True:
            waiting: set[str] = set()  # not found or busy in this pass: asked again after a pause
            while True:
                spent = {url for url, count in failed_here.items() if count >= TRIES_PER_RELAY}
                url = self.pool.choose(waiting | spent, failed_here)
                if url is None:
                    break
                attempt = self._attempt(url, cid, size, report, sources)
                if attempt.outcome == "done":
                    return report
                attempts.append((url, attempt))
                if attempt.outcome in ("absent", "busy"):
                    waiting.add(url)
                elif attempt.outcome in ("failed", "bad bytes"):
                    # Wrong bytes will be wrong again: one strike. Other failures may pass.
                    strikes = TRIES_PER_RELAY if attempt.outcome == "bad bytes" else 1
                    failed_here[url] = failed_here.get(url, 0) + strikes
                    report.failed.append(url)
            outcomes = {attempt.outcome for url, attempt in attempts if url in waiting}
            limit = max(
                self.absent_wait_s if "absent" in outcomes else 0.0,
                self.busy_wait_s if "busy" in outcomes else 0.0,
            )
            if not waiting or time.monotonic() - started >= limit:
                break
            time.sleep(0.5)
        self.store.partial_path(cid).unlink(missing_ok=True)
        shown = "; ".join(f"{url}: {attempt.reason}" for url, attempt in attempts[-len(self.pool.scores) :])
        if attempts and all(attempt.no_answer for _, attempt in attempts):
            raise SourcesUnreachable(f"could not reach any relay for {cid}: {shown}")
        raise ArtifactError(f"could not fetch {cid}: {shown or 'no relay'}")

    def _attempt(self, url: str, cid: str, size: int | None, report: FetchReport, sources: list[str]) -> Attempt:
        partial = self.store.partial_path(cid)
        verifier = CidVerifier(cid)
        offset = partial.stat().st_size if partial.exists() else 0
        bound = size if size is not None else MAX_UNSIZED_BYTES
        if offset > bound:
            partial.unlink()
            offset, sources[:] = 0, []
        if offset:
            with partial.open("rb") as handle:
                while chunk := handle.read(CHUNK_BYTES):
                    verifier.update(chunk)
            if not sources:
                sources.append("an earlier run")
        if size is not None and offset == size:
            return self._finish(url, cid, verifier, partial, report, sources, 0, 0.0)
        headers = {"Range": f"bytes={offset}-"} if offset else {}
        started = time.monotonic()
        received = 0
        try:
            with self.http.stream("GET", f"{url}/ipfs/{cid}", headers=headers) as response:
                refusal = self._refusal(response, offset, bound)
                if refusal is not None:
                    if refusal.outcome in ("absent", "busy"):
                        self.pool.released(url)
                    elif refusal.outcome == "unverifiable":
                        # Our partial bytes are longer than this relay's file: they cannot be resumed.
                        self.pool.released(url)
                        partial.unlink(missing_ok=True)
                        sources[:] = []
                    else:
                        self.pool.failed(url)
                    return refusal
                if offset and response.status_code == 200:
                    # The relay ignored the range: start over.
                    offset, verifier = 0, CidVerifier(cid)
                    partial.unlink(missing_ok=True)
                    sources[:] = []
                if offset and not report.resumed_from:
                    report.resumed_from = offset
                if url not in sources:
                    sources.append(url)
                with partial.open("ab") as handle:
                    for chunk in response.iter_bytes():  # as they come: a drip must be seen
                        if offset + received + len(chunk) > bound:
                            raise _Cut(f"sent more than the {bound} bytes {cid} can have", discard=True)
                        handle.write(chunk)
                        verifier.update(chunk)
                        received += len(chunk)
                        self._advance(cid, len(chunk))
                        elapsed = time.monotonic() - started
                        if elapsed > self.grace_s and received / elapsed < self.min_bytes_per_s:
                            raise _Cut(f"too slow ({received / elapsed:.0f} B/s after {elapsed:.0f} s), cut")
            if size is not None and offset + received < size:
                raise _Cut(f"body ended after {offset + received} of {size} bytes")
        except _Cut as cut:
            if cut.discard:
                partial.unlink(missing_ok=True)
                sources[:] = []
            self.pool.failed(url)
            return Attempt("failed", cut.reason + ("" if cut.discard else ", kept for resume"))
        except (httpx.ConnectError, httpx.ConnectTimeout):
            self.pool.failed(url)
            return Attempt("failed", "unreachable", no_answer=True)
        except httpx.ReadTimeout:
            self.pool.failed(url)
            return Attempt("failed", "stalled, kept for resume", no_answer=True)
        except httpx.HTTPError as error:
            self.pool.failed(url)
            return Attempt("failed", f"transfer broke off ({type(error).__name__}), kept for resume", no_answer=True)
        except OSError as error:
            self.pool.released(url)
            raise OwnFault(f"cannot write the download of {cid} to {partial}: {error.strerror}") from None
        return self._finish(url, cid, verifier, partial, report, sources, received, time.monotonic() - started)

    def _refusal(self, response: httpx.Response, offset: int, bound: int) -> Attempt | None:
        """What a response's status and headers already say, before its body: None when it may be read."""
        status = response.status_code
        if status == 404:
            return Attempt("absent", "not found")
        if status in (429, 503):
            return Attempt("busy", f"busy (HTTP {status})")
        if status == 416 and offset:
            return Attempt("unverifiable", "has fewer bytes than were already downloaded; starting over")
        if status not in (200, 206):
            return Attempt("failed", f"HTTP {status}")
        if status == 206 and not response.headers.get("content-range", "").startswith(f"bytes {offset}-"):
            return Attempt("failed", f"sent a range it was not asked for ({response.headers.get('content-range')})")
        length = response.headers.get("content-length")
        start = offset if status == 206 else 0
        if length is not None and length.isdigit() and start + int(length) > bound:
            return Attempt("failed", f"announced {length} bytes, more than the {bound} the CID can have")
        return None

    def _finish(
        self,
        url: str,
        cid: str,
        verifier: CidVerifier,
        partial: Path,
        report: FetchReport,
        sources: list[str],
        received: int,
        seconds: float,
    ) -> Attempt:
        if not verifier.matches():
            partial.unlink(missing_ok=True)
            mixed = len(sources) > 1
            sources[:] = []
            if mixed:
                # Which relay sent the wrong part cannot be told: blame none, start from zero.
                self.pool.released(url)
                return Attempt("unverifiable", "resumed bytes did not verify; starting over")
            self.pool.failed(url)
            report.rejected.append(url)
            return Attempt("bad bytes", "bad bytes")
        self.store.install_verified_file(cid, partial)
        self.pool.done(url, received, seconds)
        report.size = verifier.size
        report.relays.append(url)
        return Attempt("done")

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
                return list(workers.map(lambda cid: self.fetch(cid, (sizes or {}).get(cid)), cids))
        finally:
            if self.progress is not None:
                self.progress.stop()

    def fetch_manifest_tree(self, cid: str) -> Manifest:
        """Fetches a manifest and all its shards (each verified, each bounded by its listed size)."""
        self.fetch(cid)
        manifest = parse_manifest(self.store.get(cid), cid)
        shards = [shard.cid for shard in manifest.shards]
        if self.order_seed is not None:
            random.Random(self.order_seed).shuffle(shards)
        self.fetch_many(shards, {s.cid: s.size for s in manifest.shards})
        return manifest


class _Cut(Exception):
    """A transfer this client stopped (or that ended short): counted against the relay."""

    def __init__(self, reason: str, discard: bool = False) -> None:
        super().__init__(reason)
        self.reason, self.discard = reason, discard


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
