"""A TCP proxy a test can cut and restore: an RPC endpoint that goes away for a while."""

from __future__ import annotations

import contextlib
import socket
import threading

from protocol.processes import free_port


class TcpProxy:
    """Forwards 127.0.0.1:port to a target; `cut()` closes the listener and every open connection,
    `restore()` listens again on the same port."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = free_port()
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._listener: socket.socket | None = None
        self.restore()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def restore(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def cut(self) -> None:
        with self._lock:
            for sock in [*self._sockets, *([self._listener] if self._listener else [])]:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()
            self._sockets.clear()
            self._listener = None

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port))
            except OSError:
                client.close()
                continue
            with self._lock:
                self._sockets += [client, upstream]
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(source, sink), daemon=True).start()

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)


class NoTraceRpc:
    """A JSON-RPC endpoint in front of a node that forwards every call but `debug_*`, which it answers
    as a node without tracing does (-32601, method not found): how a chain whose RPC serves no traces
    looks to a client."""

    def __init__(self, target_url: str) -> None:
        import http.server
        import json

        import httpx

        client = httpx.Client(timeout=30)

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # the name http.server calls
                body = self.rfile.read(int(self.headers["Content-Length"]))
                request = json.loads(body)
                if str(request.get("method", "")).startswith("debug_"):
                    refused = {"code": -32601, "message": "method not found"}
                    answer = json.dumps({"jsonrpc": "2.0", "id": request.get("id"), "error": refused}).encode()
                else:
                    answer = client.post(target_url, content=body, headers={"Content-Type": "application/json"}).content
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
