"""HTTP servers that misbehave the ways a relay can, serving one CID's true bytes badly.

Each is a small threaded server on a free loopback port (test scaffolding, not one of our
components). `mode` picks the misbehaviour:

- `short`: announces the full length, sends half, closes;
- `stall`: announces the full length, sends half, then sends nothing more for a minute;
- `drip`: sends one small piece a second, forever;
- `long-header`: announces more bytes than the file has, sends the file, closes;
- `short-header`: announces fewer bytes than the file has and sends that many;
- `wrong`: the full length, with one byte flipped;
- `wrong-short`: the first half with one byte flipped, announced as whole, then closes;
- `endless`: chunked, no length, random bytes without end;
- `error`: HTTP 500 to everything;
- `wrong-range`: answers a `Range` request with 206 and the bytes from 0;
- `busy`: HTTP 503 to everything.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MODES = (
    "short", "stall", "drip", "long-header", "short-header", "wrong", "wrong-short", "endless", "error",
    "wrong-range", "busy",
)  # fmt: skip


class LyingRelay:
    """Serves `data` under `/ipfs/<cid>` in the given misbehaving `mode`; `requests` counts the GETs."""

    def __init__(self, cid: str, data: bytes, mode: str) -> None:
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode}")
        self.cid, self.data, self.mode = cid, data, mode
        self.requests = 0
        self.closing = threading.Event()
        liar = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                liar.requests += 1
                with contextlib.suppress(OSError):
                    liar.answer(self)
                self.close_connection = True

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.closing.set()
        self.server.shutdown()
        self.server.server_close()

    def answer(self, handler: BaseHTTPRequestHandler) -> None:
        data, mode, half = self.data, self.mode, len(self.data) // 2
        if handler.path != f"/ipfs/{self.cid}":
            self.send(handler, 404, b"not here")
        elif mode in ("error", "busy"):
            self.send(handler, 500 if mode == "error" else 503, b"no")
        elif mode == "short":
            self.send(handler, 200, data[:half], length=len(data))
        elif mode == "stall":
            self.send(handler, 200, data[:half], length=len(data), close=False)
            self.closing.wait(60)
        elif mode == "long-header":
            self.send(handler, 200, data, length=len(data) + 1000)
        elif mode == "short-header":
            self.send(handler, 200, data[: len(data) - 1000], length=len(data) - 1000)
        elif mode in ("wrong", "wrong-short"):
            damaged = bytearray(data)
            damaged[half // 2] ^= 0xFF
            body = bytes(damaged) if mode == "wrong" else bytes(damaged[:half])
            self.send(handler, 200, body, length=len(data))
        elif mode == "wrong-range":
            if "Range" in handler.headers:
                handler.send_response(206)
                handler.send_header("Content-Range", f"bytes 0-{len(data) - 1}/{len(data)}")
                handler.send_header("Content-Length", str(len(data)))
                handler.end_headers()
                handler.wfile.write(data)
            else:
                self.send(handler, 200, data[:half], length=len(data))
        elif mode in ("drip", "endless"):
            handler.send_response(200)
            handler.send_header("Transfer-Encoding", "chunked")
            handler.end_headers()
            piece = b"x" * (64 if mode == "drip" else 1 << 16)
            while not self.closing.is_set():
                handler.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                handler.wfile.flush()
                if mode == "drip":
                    time.sleep(0.5)

    @staticmethod
    def send(
        handler: BaseHTTPRequestHandler, status: int, body: bytes, length: int | None = None, close: bool = True
    ) -> None:
        handler.send_response(status)
        handler.send_header("Content-Length", str(len(body) if length is None else length))
        handler.end_headers()
        handler.wfile.write(body)
        handler.wfile.flush()
        if close:  # outright, so that a short body is seen as short, not as a slow one
            with contextlib.suppress(OSError):
                handler.connection.shutdown(socket.SHUT_RDWR)
