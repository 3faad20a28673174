"""The client side of the job server: ``python -m balagg ARGS`` under a server (:data:`SOCKET_ENV` set)
hands its job to the server and becomes its stand-in (signals, exit status) until the job ends."""

from __future__ import annotations

import os
import signal
import socket
import sys
import time

from balagg.errors import exit_status
from balagg.jobserver import SOCKET_ENV
from balagg.jobserver.protocol import MAX_FDS, all_fds, receive, send

def run_through_server(argv: list[str]) -> int | None:
    """Run ``argv`` (``sys.argv``) as a job of the server named by :data:`SOCKET_ENV`.

    Returns the job's exit code, dies by the job's signal when it died of one, or returns ``None``
    (nothing has run) when there is no server or it refused the job: the caller then runs it itself.
    """
    path = os.environ.get(SOCKET_ENV)
    if not path or argv[1:2] == ["jobserver"]:
        return None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
        fds = inherited_fds(exclude=sock.fileno())
        if len(fds) > MAX_FDS:
            sock.close()
            return None
        request = {"argv": list(argv), "cwd": os.getcwd(), "env": dict(os.environ), "path": list(sys.path),
                   "executable": sys.executable, "umask": _current_umask(), "fds": fds}
        send(sock, request, fds)
        reply, _ = receive(sock)
    except OSError:
        sock.close()
        return None
    if reply is None:  # the server went away after taking the request: it may have started the job
        print(f"error: the balagg job server ({path}) went away before answering; job not run here",
              file=sys.stderr)
        return 1
    if "pid" not in reply:  # refused: nothing has run
        sock.close()
        return None
    return _wait_for_job(sock, reply["pid"])


def inherited_fds(exclude: int = -1) -> list[int]:
    """This process's open descriptors that a program it executed would inherit (0, 1, 2 and any
    other non-close-on-exec one, such as the train launcher's lock), in order."""
    fds = []
    for fd in all_fds():
        try:
            if fd != exclude and os.get_inheritable(fd):
                fds.append(fd)
        except OSError:  # the descriptor of the listing itself, closed by now
            continue
    return sorted(fds)


def _current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _wait_for_job(sock: socket.socket, pid: int) -> int:
    """Forward signals to the job ``pid`` until the server reports its status."""
    def forward(signum, _frame):
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(signum, forward)
    while True:
        try:
            reply, _ = receive(sock)
            break
        except InterruptedError:
            continue
    if reply is None:  # the server died: the job must not go on without anyone waiting for it
        forward(signal.SIGKILL, None)
        print(f"error: the balagg job server ({os.environ.get(SOCKET_ENV)}) went away; job {pid} killed",
              file=sys.stderr)
        return 1
    status = int(reply["status"])
    if status < 0:  # died of a signal: so does the client, as a job run without the server would
        if -status not in (signal.SIGKILL, signal.SIGSTOP):  # those two have no handler to reset
            signal.signal(-status, signal.SIG_DFL)
        os.kill(os.getpid(), -status)
        time.sleep(1)
    return exit_status(status)
