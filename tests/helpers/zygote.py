"""A warm parent for the `crucible` processes the tests start: it imports what every role imports (torch,
transformers' Llama, the CLI) once, then forks a child per command, which becomes that command as the
`crucible` console script would run it (`sys.exit(cli.main.run())`) with the caller's argv, environment,
working folder, stdin, stdout and stderr, and ends as the interpreter would but for tearing its modules down
(`finish`).

On two cores the tests are CPU-bound, and a role process spent about 4.5 of its CPU seconds importing
before it did anything; a forked child starts in a few milliseconds. Each child is still its own process,
running the same code from the same entry point: signals, exit codes, pipes and files behave as they do for
an exec'd one. What it does not repeat is the import itself, so the tests that check imports (`crucible
--help` without torch) and those that walk the README start plain processes.

Run as `python zygote.py FD`, FD one end of a Unix socket pair (tests/helpers/warm.py holds the other).
Requests arrive as one JSON line each, {"id", "argv", "env", "cwd"}, with three file descriptors (stdin,
stdout, stderr) alongside. Answers are JSON lines: {"started": id, "pid": pid} with a pidfd of the child
alongside (signals go through it, so a reused pid is never hit), and {"exited": pid, "code": code} when the
child ends, `code` as Popen's returncode (negative: the signal that ended it). The zygote runs one thread;
when its socket closes it kills the children still running and exits.
"""

from __future__ import annotations

import array
import atexit
import contextlib
import ctypes
import json
import os
import select
import signal
import socket
import sys
import threading
from typing import Any, NoReturn

MAX_FDS = 96  # three a request; room for many requests read at once
PR_SET_PDEATHSIG = 1


def warm() -> None:
    """Imports what a role imports before it does anything (no threads are started: the tests run with
    OMP_NUM_THREADS=1, and torch starts its pools on first use)."""
    from protocol.ml.model import quiet_transformers

    quiet_transformers()
    import torch  # noqa: F401
    from transformers import AutoModelForCausalLM, LlamaForCausalLM  # noqa: F401

    import cli.main  # noqa: F401
    import node.runner  # noqa: F401
    import validator.runner  # noqa: F401


def _receive(sock: socket.socket, buffer: bytearray, fds: list[int]) -> bool:
    """Reads what the socket holds into `buffer` and `fds`; False once it is closed."""
    room = array.array("i")
    data, ancillary, _flags, _address = sock.recvmsg(1 << 16, socket.CMSG_SPACE(MAX_FDS * room.itemsize))
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            room.frombytes(payload[: len(payload) - len(payload) % room.itemsize])
    fds.extend(room)
    buffer.extend(data)
    return bool(data)


def _reap(sock: socket.socket, children: set[int]) -> None:
    while children:
        pid, status = os.waitpid(-1, os.WNOHANG)
        if pid == 0:
            return
        children.discard(pid)
        sock.sendall(json.dumps({"exited": pid, "code": os.waitstatus_to_exitcode(status)}).encode() + b"\n")


def serve(sock: socket.socket) -> dict[str, Any]:
    """Answers requests until the socket closes (then kills its children and exits). Returns only in a forked
    child: its request, with its stdin, stdout and stderr descriptors under "stdio"."""
    buffer, fds = bytearray(), []
    children: set[int] = set()
    # A child's exit wakes the loop at once: SIGCHLD writes a byte to `woken` (the handler itself does nothing).
    woken, wake = socket.socketpair()
    woken.setblocking(False)
    wake.setblocking(False)
    signal.set_wakeup_fd(wake.fileno(), warn_on_full_buffer=False)
    signal.signal(signal.SIGCHLD, lambda _signal, _frame: None)
    while True:
        readable, _, _ = select.select([sock, woken], [], [], 1.0)
        if woken in readable:
            with contextlib.suppress(BlockingIOError):
                woken.recv(4096)
        _reap(sock, children)
        if sock not in readable:
            continue
        if not _receive(sock, buffer, fds):
            for pid in children:
                os.kill(pid, signal.SIGKILL)
            os._exit(0)
        while b"\n" in buffer:
            line, _, rest = bytes(buffer).partition(b"\n")
            buffer[:] = rest
            request = json.loads(line)
            stdio, fds[:] = fds[:3], fds[3:]
            pid = os.fork()
            if pid == 0:
                signal.set_wakeup_fd(-1)
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                woken.close()
                wake.close()
                for fd in fds:  # another request's, received in the same read
                    os.close(fd)
                request["stdio"] = stdio
                return request
            for fd in stdio:
                os.close(fd)
            children.add(pid)
            pidfd = os.pidfd_open(pid)
            answer = json.dumps({"started": request["id"], "pid": pid}).encode() + b"\n"
            socket.send_fds(sock, [answer], [pidfd])
            os.close(pidfd)


def become(request: dict[str, Any], sock: socket.socket) -> None:
    """In the child: dies with the zygote (as it would with a test worker that started it directly and was
    killed), and takes on the caller's stdio, environment, folder and argv."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    sock.close()
    for target, fd in enumerate(request["stdio"]):
        os.dup2(fd, target)
        os.close(fd)
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    sys.argv = list(request["argv"])


def finish(code: object) -> NoReturn:
    """Ends the child as the interpreter ends a process, in its order, up to the part the child leaves out:
    joins the threads that are not daemons, runs the atexit handlers (weakref finalizers among them), flushes
    stdout and stderr, then exits with the code a `SystemExit(code)` gives. Left out: tearing down every
    module, which with torch and transformers loaded takes about 1.2 CPU s and shows nothing outside."""
    threading._shutdown()  # type: ignore[attr-defined]  # what the interpreter calls first at exit
    atexit._run_exitfuncs()
    if code is None:
        status = 0
    elif isinstance(code, int):
        status = code
    else:
        print(code, file=sys.stderr)
        status = 1
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(status & 0xFF)


if __name__ == "__main__":
    warm()
    channel = socket.socket(fileno=int(sys.argv[1]))
    command = serve(channel)
    become(command, channel)
    from cli.main import run

    try:
        run()
    except SystemExit as exit:
        finish(exit.code)
    except BaseException:  # as the interpreter does with an uncaught exception: its traceback, and 1
        sys.excepthook(*sys.exc_info())
        finish(1)
    finish(0)
