"""A relay: serves any CID it holds at the IPFS gateway path, takes signed uploads, mirrors others.

- `GET|HEAD /ipfs/{cid}` with `Range` support, from the relay's LocalStore; an optional cap on
  the bytes per second it sends, shared by all responses (to emulate a home uplink).
- `PUT /ipfs/{cid}`: an upload signed (EIP-191) by an address over
  `crucible-upload:{cid}:{size}:{expiry}`; refused when unsigned, expired, over the size bound,
  over the address's rate, from an address without stake (when a stake check is configured) or
  when the bytes do not hash to the CID. Nothing is stored unless every check passed.
- `GET /announcements?after=N`: the manifests it holds, in the order it got them; followers poll
  it and mirror each manifest and its shards (verified), then announce them too.
- Peers: a follower takes each shard from the relays it knows as peers first (verified against its
  CID like any fetch) and from its origin only when no peer has it, so that the origin's uplink is
  not the bound of every fan-out. Fan-in (shards fetched at once) and fan-out (responses served at
  once; beyond it a 503 that clients take as "busy, ask another") are bounded per relay.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eth_account import Account
from eth_account.messages import encode_defunct
from fastapi import FastAPI, Query, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from protocol.artifacts.cid import CidVerifier
from protocol.artifacts.fetch import Fetcher
from protocol.artifacts.manifest import MAX_MANIFEST_BYTES, parse_manifest
from protocol.artifacts.store import LocalStore, safe_cid
from protocol.artifacts.upload import MAX_EXPIRY_AHEAD_S, UPLOAD_HEADERS, upload_message
from protocol.errors import ArtifactError, ConfigError


@dataclass
class RelaySettings:
    """How a relay behaves."""

    store_dir: Path
    max_upload_bytes: int = 256 * 1024 * 1024
    uploads_per_minute: int = 120
    upload_bytes_per_minute: int = 4 * 1024 * 1024 * 1024
    serve_bytes_per_s: int = 0  # 0: no cap
    follow: list[str] = field(default_factory=list)
    follow_interval_s: float = 1.0
    peers: list[str] = field(default_factory=list)
    fan_in: int = 1
    max_serving: int = 32
    stake_check: Callable[[str], bool] | None = None


class _Throttle:
    """A token bucket shared by every response: at most `rate` bytes per second leave the relay."""

    def __init__(self, rate: int) -> None:
        self.rate = rate
        self.lock = threading.Lock()
        self.next_free = time.monotonic()

    def wait(self, nbytes: int) -> None:
        if self.rate <= 0:
            return
        with self.lock:
            now = time.monotonic()
            start = max(now, self.next_free)
            self.next_free = start + nbytes / self.rate
        delay = start - now
        if delay > 0:
            time.sleep(delay)


class _UploadLimits:
    """Per-address sliding-minute limits on upload count and bytes."""

    def __init__(self, count: int, nbytes: int) -> None:
        self.count, self.nbytes = count, nbytes
        self.history: dict[str, deque[tuple[float, int]]] = {}
        self.lock = threading.Lock()

    def admit(self, address: str, size: int) -> str | None:
        now = time.monotonic()
        with self.lock:
            events = self.history.setdefault(address, deque())
            while events and now - events[0][0] > 60:
                events.popleft()
            if len(events) >= self.count:
                return f"more than {self.count} uploads a minute from {address}"
            if sum(n for _, n in events) + size > self.nbytes:
                return f"more than {self.nbytes} bytes a minute from {address}"
            events.append((now, size))
        return None


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


def _parse_range(header: str | None, size: int) -> tuple[int, int] | str | None:
    """Returns (start, end exclusive), None for the whole file, or 'bad' when unsatisfiable."""
    if not header:
        return None
    if not header.startswith("bytes=") or "," in header:
        return "bad"
    first, _, last = header[6:].partition("-")
    try:
        if first == "":
            length = int(last)
            start, end = max(size - length, 0), size
        else:
            start = int(first)
            end = int(last) + 1 if last else size
    except ValueError:
        return "bad"
    if start >= size or start < 0 or end <= start:
        return "bad"
    return start, min(end, size)


class Relay:
    """The relay's state: its store, limits, announcements and followers."""

    def __init__(self, settings: RelaySettings) -> None:
        self.settings = settings
        self.store = LocalStore(settings.store_dir)
        self.throttle = _Throttle(settings.serve_bytes_per_s)
        self.limits = _UploadLimits(settings.uploads_per_minute, settings.upload_bytes_per_minute)
        self.log_path = self.store.root / ".announcements"
        self.announced: list[str] = self.log_path.read_text().split() if self.log_path.exists() else []
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.serving = 0
        self.served_bytes = 0

    def admit(self) -> bool:
        """Takes a serving slot, unless all `max_serving` are taken."""
        with self.lock:
            if self.serving >= self.settings.max_serving:
                return False
            self.serving += 1
            return True

    def announce(self, cid: str) -> None:
        """Adds a manifest to the announcements (once)."""
        with self.lock:
            if cid in self.announced:
                return
            self.announced.append(cid)
            with self.log_path.open("a") as log:
                log.write(cid + "\n")

    def maybe_announce(self, cid: str) -> None:
        """Announces `cid` when its bytes are a manifest."""
        if self.store.size_of(cid) > MAX_MANIFEST_BYTES:
            return
        try:
            parse_manifest(self.store.path_for(cid).read_bytes(), cid)
        except ArtifactError:
            return
        self.announce(cid)

    def chunks(self, cid: str, start: int, end: int) -> Iterator[bytes]:
        """The stored bytes, paced by the relay's send cap."""
        for chunk in self.store.open_chunks(cid, start, end):
            self.throttle.wait(len(chunk))
            yield chunk
            with self.lock:
                self.served_bytes += len(chunk)

    def release(self) -> None:
        with self.lock:
            self.serving -= 1

    def follow_forever(self, origin: str) -> None:
        """Polls `origin` for announcements and mirrors every manifest with its shards, from the
        peers first and from `origin` when no peer has a shard."""
        import httpx

        # Each relay mirrors shards in its own order (seeded by its store's path), so relays that
        # follow one origin hold different shards early and clients can spread over them.
        seed = int.from_bytes(hashlib.sha256(str(self.store.root.resolve()).encode()).digest()[:8], "big")
        # Few shards at a time (fan-in, 1 by default): each completed shard can be served at once,
        # instead of all landing together at the end.
        peers = [peer.rstrip("/") for peer in self.settings.peers if peer.rstrip("/") != origin]
        fetcher = Fetcher(
            peers, self.store, parallel=self.settings.fan_in, show_progress=False, order_seed=seed, last_resort=[origin]
        )
        seen = 0
        while not self.stop.wait(self.settings.follow_interval_s):
            try:
                response = httpx.get(f"{origin}/announcements", params={"after": seen}, timeout=10)
                response.raise_for_status()
                document = response.json()
            except (httpx.HTTPError, ValueError):
                continue
            for cid in document.get("manifests", []):
                try:
                    fetcher.fetch_manifest_tree(safe_cid(cid))
                    self.announce(cid)
                except (ArtifactError, ConfigError):
                    break  # try again at the next poll, from the same place
                seen += 1


class _Slot:
    """A response body that gives its relay's serving slot back once: at its end, or when it is
    dropped unfinished (the client went away, even before the first byte)."""

    def __init__(self, relay: Relay, body: Iterator[bytes]) -> None:
        self.relay, self.body, self.held = relay, body, True

    def __iter__(self) -> _Slot:
        return self

    def __next__(self) -> bytes:
        try:
            return next(self.body)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        if self.held:
            self.held = False
            self.relay.release()

    def __del__(self) -> None:
        self.close()


class _SlotResponse(StreamingResponse):
    """Streams a `_Slot` and gives the slot back as soon as the response is over, however it
    ended: sent in full, or cut short by a client that went away (the body's thread may still be
    inside its last read; waiting for the garbage collector held the slot for seconds)."""

    def __init__(self, slot: _Slot, **kwargs: Any) -> None:
        super().__init__(slot, **kwargs)
        self.slot = slot

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.slot.close()


def create_app(settings: RelaySettings) -> FastAPI:
    """Returns the relay's FastAPI application."""
    relay = Relay(settings)
    app = FastAPI(title="Crucible relay", version="1", description=__doc__)
    app.state.relay = relay

    @app.on_event("startup")
    async def _start_followers() -> None:
        for origin in settings.follow:
            threading.Thread(target=relay.follow_forever, args=(origin.rstrip("/"),), daemon=True).start()

    @app.on_event("shutdown")
    async def _stop_followers() -> None:
        relay.stop.set()

    @app.get("/healthz")
    def healthz() -> dict[str, object]:
        return {
            "ok": True,
            "cids": len(relay.store.cids()),
            "manifests": len(relay.announced),
            "serving": relay.serving,
            "served_bytes": relay.served_bytes,
        }

    @app.api_route("/ipfs/{cid}", methods=["GET", "HEAD"])
    def serve(cid: str, request: Request) -> Response:
        try:
            cid = safe_cid(cid)
        except ConfigError as error:
            return _error(400, str(error))
        if not relay.store.has(cid):
            return _error(404, f"{cid} is not held here")
        size = relay.store.size_of(cid)
        span = _parse_range(request.headers.get("range"), size)
        if span == "bad":
            return Response(status_code=416, headers={"Content-Range": f"bytes */{size}"})
        start, end = span if isinstance(span, tuple) else (0, size)
        headers = {"Accept-Ranges": "bytes", "Content-Length": str(end - start), "ETag": f'"{cid}"'}
        status = 200
        if isinstance(span, tuple):
            status = 206
            headers["Content-Range"] = f"bytes {start}-{end - 1}/{size}"
        if request.method == "HEAD":
            return Response(status_code=status, headers=headers)
        if not relay.admit():
            return Response(status_code=503, headers={"Retry-After": "1"}, content=b"busy: ask another relay")
        body = _Slot(relay, relay.chunks(cid, start, end))
        return _SlotResponse(body, status_code=status, headers=headers, media_type="application/octet-stream")

    @app.put("/ipfs/{cid}")
    async def upload(cid: str, request: Request) -> Response:
        try:
            cid = safe_cid(cid)
        except ConfigError as error:
            return _error(400, str(error))
        missing = [name for name in UPLOAD_HEADERS if name not in request.headers]
        if missing:
            return _error(401, f"unsigned upload: missing {', '.join(missing)}")
        length_header = request.headers.get("content-length")
        if length_header is None or not length_header.isdigit():
            return _error(411, "an upload needs a Content-Length")
        size = int(length_header)
        if size > settings.max_upload_bytes:
            return _error(413, f"upload of {size} bytes is over this relay's bound of {settings.max_upload_bytes}")
        try:
            expiry = int(request.headers["x-crucible-expiry"])
            claimed = request.headers["x-crucible-address"]
            message = encode_defunct(text=upload_message(cid, size, expiry))
            signer = Account.recover_message(message, signature=request.headers["x-crucible-signature"])
        except (ValueError, TypeError) as error:
            return _error(401, f"bad upload signature: {error}")
        now = time.time()
        if expiry < now or expiry > now + MAX_EXPIRY_AHEAD_S:
            return _error(401, f"upload signature expired or too far ahead (expiry {expiry}, now {int(now)})")
        if signer.lower() != claimed.lower():
            return _error(401, "the signature is not by the address the upload names")
        if settings.stake_check is not None:
            staked = await asyncio.to_thread(settings.stake_check, signer)
            if not staked:
                return _error(403, f"{signer} has no stake: only staked addresses may upload")
        refusal = relay.limits.admit(signer, size)
        if refusal:
            return _error(429, refusal)
        if relay.store.has(cid):
            await request.body()
            return JSONResponse({"cid": cid, "stored": False})
        verifier = CidVerifier(cid)
        descriptor, name = tempfile.mkstemp(dir=relay.store.root, prefix=".upload-")
        received = 0
        try:
            with os.fdopen(descriptor, "wb") as handle:
                async for chunk in request.stream():
                    received += len(chunk)
                    if received > size:
                        return _error(413, "the upload is longer than its Content-Length")
                    verifier.update(chunk)
                    handle.write(chunk)
            if received != size:
                return _error(400, f"the upload ended after {received} of {size} bytes")
            if not verifier.matches():
                return _error(422, f"the uploaded bytes do not hash to {cid}: nothing stored")
            relay.store.install_verified_file(cid, Path(name))
        finally:
            Path(name).unlink(missing_ok=True)
        relay.maybe_announce(cid)
        return JSONResponse({"cid": cid, "stored": True})

    @app.get("/announcements")
    def announcements(after: int = Query(0, ge=0, le=10**9)) -> dict[str, object]:
        with relay.lock:
            listed = relay.announced[after : after + 1000]
        return {"manifests": listed, "next": after + len(listed)}

    return app
