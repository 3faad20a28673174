"""Process lifetime helpers shared by the train launcher, the job server and the verifier pool (stdlib only)."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal

PR_SET_PDEATHSIG = 1
STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR1, signal.SIGURG)
"""The signals a trainer acts on at its next generation-cycle boundary (balagg.train.deadline), and which
its launcher and torchrun's agent therefore pass on to every rank: Slurm's time limit, scancel and
preemption (SIGTERM) and a user's ``kill -USR1`` stop it with a resumable checkpoint; SIGURG is the Slurm
profile's warning before the limit (``--signal=URG@...``; every process that does not handle it ignores it,
where SIGUSR1 would end Snakemake in the job), after which it stops as soon as two more cycles may not fit."""


def die_with_parent(sig: int = signal.SIGKILL) -> None:
    """Ask Linux to send ``sig`` to this process when its parent ends (PR_SET_PDEATHSIG); exit at once if
    the parent is already gone. A no-op where prctl is unavailable (not Linux)."""
    parent = os.getppid()
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
            return
    except (OSError, AttributeError):
        return
    if os.getppid() != parent or parent == 1:
        os._exit(1)


def reset_signal_handlers() -> None:
    """Give every signal that has a Python handler the disposition a fresh interpreter starts with
    (SIGINT: KeyboardInterrupt, the others: the default), as ``exec`` would; ignored signals stay ignored.
    For a process forked from one that installed its own handlers (a trainer's stop-at-the-next-step
    SIGTERM handler, say), which should die of those signals as a spawned process does."""
    for signum in signal.valid_signals():
        try:
            handler = signal.getsignal(signum)
        except (OSError, ValueError):
            continue
        if callable(handler) and handler is not signal.default_int_handler:
            signal.signal(signum, signal.default_int_handler if signum == signal.SIGINT else signal.SIG_DFL)


def children_with_env(parent: int, name: str) -> list[int]:
    """The live child processes of ``parent`` whose environment (as they were started) sets ``name``,
    read from /proc (Linux); an empty list where /proc is not there."""
    found = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return found
    marker = name.encode() + b"="
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as stat:
                fields = stat.read().rsplit(b")", 1)[1].split()  # after "pid (comm)": state, ppid, ...
            if fields[0] == b"Z" or int(fields[1]) != parent:
                continue
            with open(f"/proc/{entry}/environ", "rb") as environ:
                if any(item.startswith(marker) for item in environ.read().split(b"\0")):
                    found.append(int(entry))
        except (OSError, IndexError, ValueError):  # gone meanwhile, or not ours to read
            continue
    return found
