"""`crucible` commands started from a warm parent (tests/helpers/zygote.py) instead of a fresh interpreter:
`WarmProcess` answers the parts of `subprocess.Popen` the tests use, and `run_crucible` those of
`subprocess.run`. One zygote per test worker, started on first use; its children are real processes,
each with its own pipes, exit code and signals."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from itertools import count
from pathlib import Path
from typing import IO

ZYGOTE = Path(__file__).with_name("zygote.py")
TESTS = Path(__file__).resolve().parent.parent


class _Zygote:
    """The warm parent and the thread that reads its answers."""

    def __init__(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")]))}
        self.process = subprocess.Popen(
            [sys.executable, str(ZYGOTE), str(theirs.fileno())], pass_fds=[theirs.fileno()], env=env,
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        )  # fmt: skip
        theirs.close()
        self.sock = ours
        self._ids = count()
        self._send = threading.Lock()
        self._changed = threading.Condition()
        self._started: dict[int, tuple[int, int]] = {}
        self._exited: dict[int, int] = {}
        self.gone = False
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        buffer, fds = b"", []
        while True:
            data, received, _flags, _address = socket.recv_fds(self.sock, 1 << 16, 64)
            if not data:  # the zygote is gone, and its children with it (they die with their parent)
                with self._changed:
                    self.gone = True
                    self._changed.notify_all()
                return
            fds.extend(received)
            buffer += data
            while b"\n" in buffer:
                line, _, buffer = buffer.partition(b"\n")
                answer = json.loads(line)
                with self._changed:
                    if "started" in answer:
                        self._started[answer["started"]] = (answer["pid"], fds.pop(0))
                    else:
                        self._exited[answer["exited"]] = answer["code"]
                    self._changed.notify_all()

    def start(self, argv: list[str], env: dict[str, str], stdio: list[int]) -> tuple[int, int]:
        """Forks `argv` with these stdio descriptors; returns its pid and a pidfd."""
        request = next(self._ids)
        line = json.dumps({"id": request, "argv": argv, "env": env, "cwd": os.getcwd()}).encode() + b"\n"
        with self._send:
            socket.send_fds(self.sock, [line], stdio)
        with self._changed:
            if not self._changed.wait_for(lambda: request in self._started or self.gone, timeout=60) or self.gone:
                raise RuntimeError(f"the zygote did not start {argv[1:]} (it exited {self.process.poll()})")
            return self._started.pop(request)

    def exit_code(self, pid: int, timeout: float | None) -> int | None:
        with self._changed:
            self._changed.wait_for(lambda: pid in self._exited or self.gone, timeout=timeout)
            return self._exited.get(pid, -signal.SIGKILL if self.gone else None)


_zygote: _Zygote | None = None
_zygote_lock = threading.Lock()


def _the_zygote() -> _Zygote:
    global _zygote
    with _zygote_lock:
        if _zygote is None or _zygote.process.poll() is not None:
            _zygote = _Zygote()
        return _zygote


class WarmProcess:
    """`crucible ARGS` forked from the warm parent, with Popen's pid, stdout and stderr (text pipes),
    returncode, poll, wait, send_signal, terminate and kill. Its stdin is /dev/null."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        self.args = args
        zygote = _the_zygote()
        (out, out_end), (err, err_end) = os.pipe(), os.pipe()
        null = os.open(os.devnull, os.O_RDONLY)
        try:
            self.pid, self._pidfd = zygote.start(args, env, [null, out_end, err_end])
        finally:
            for fd in (null, out_end, err_end):
                os.close(fd)
        self._zygote = zygote
        self.returncode: int | None = None
        self.stdout: IO[str] = open(out, encoding="utf-8")  # noqa: SIM115
        self.stderr: IO[str] = open(err, encoding="utf-8")  # noqa: SIM115

    def poll(self) -> int | None:
        return self.wait(timeout=0) if self.returncode is None else self.returncode

    def wait(self, timeout: float | None = None) -> int | None:
        if self.returncode is None:
            code = self._zygote.exit_code(self.pid, timeout)
            if code is None:
                if timeout:
                    raise subprocess.TimeoutExpired(self.args, timeout)
                return None
            self.returncode = code
            os.close(self._pidfd)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):  # it has exited; its exit code is on its way
                signal.pidfd_send_signal(self._pidfd, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def run_crucible(args: list[str], env: dict[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
    """`subprocess.run(args, capture_output=True, text=True, env=env, timeout=timeout)` for a `crucible`
    command (args[0] the console script), forked from the warm parent."""
    process = WarmProcess(args, env)
    streams = {"out": process.stdout, "err": process.stderr}
    read: dict[str, str] = {}
    readers = [
        threading.Thread(target=lambda k=k, s=s: read.update({k: s.read()}), daemon=True) for k, s in streams.items()
    ]
    for reader in readers:
        reader.start()
    deadline = time.monotonic() + timeout
    try:
        for reader in readers:
            reader.join(max(0.0, deadline - time.monotonic()))
            if reader.is_alive():
                raise subprocess.TimeoutExpired(args, timeout)
        code = process.wait(max(0.001, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        raise
    finally:
        for stream in streams.values():
            stream.close()
    assert code is not None  # wait with a timeout raises rather than return None
    return subprocess.CompletedProcess(args, code, read.get("out", ""), read.get("err", ""))
