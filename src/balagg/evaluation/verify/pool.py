"""Run a verifier over many (text, gold) pairs in worker processes, with a hard per-sample timeout.

Each worker is a process that imports the verifier once and answers one request at a time over a pipe.

How a worker starts: on Linux, while the calling process has a single thread, it is *forked*. It then
shares what is imported already (math-verify and sympy), so a start costs a fraction of a fresh
interpreter's, which imports them again. A forked worker resets its
signal handlers to a fresh interpreter's. It also asks to die with its parent (PR_SET_PDEATHSIG): it
holds a copy of the parent's end of every pipe, its own included, so it would never see its parent's
death as the end of its pipe. Otherwise, where another thread might hold a lock that the child would
inherit, a worker is *spawned* (a fresh interpreter). :meth:`VerifierPool.start` starts the workers at
once, so a caller can start them before it starts threads (the trainer does, before it loads the model).

The parent keeps every worker busy and kills a worker whose current sample runs past ``timeout_s``
(signals cannot interrupt a long C call such as a huge integer power; killing the process can), records
that sample as incorrect and timed out, and starts a replacement. A worker that dies (killed from
outside, out of memory) is replaced and its sample retried once, so a stray kill changes no verdict; a
second death on the same sample scores it 0 as an error. A verifier exception on one sample scores that
sample 0 and is counted as an error; the other samples are unaffected. A worker that died while idle is
replaced when it is next given a sample.
"""

from __future__ import annotations

import importlib
import multiprocessing
import sys
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait

from balagg import settings
from balagg.processes import die_with_parent, reset_signal_handlers


def _load(spec: str):
    """The function named ``module:function``; the module's ``warm_up()``, if any, is run first."""
    module_name, _, name = spec.partition(":")
    module = importlib.import_module(module_name)
    if callable(getattr(module, "warm_up", None)):
        module.warm_up()
    return getattr(module, name)


def _serve(conn: Connection, spec: str, forked: bool = False) -> None:
    """Worker loop: receive (index, text, gold), send (index, verdict, error or None)."""
    if forked:  # what exec would have given a spawned worker; and no waiting for an EOF that cannot come
        reset_signal_handlers()
        die_with_parent()
    verify = _load(spec)
    conn.send("ready")
    while True:
        try:
            request = conn.recv()
        except (EOFError, OSError):
            return
        if request is None:
            return
        index, text, gold = request
        try:
            conn.send((index, bool(verify(text, gold)), None))
        except Exception as error:  # noqa: BLE001 -- one bad sample must not stop the others
            conn.send((index, False, f"{type(error).__name__}: {error}"))


def fork_is_safe() -> bool:
    """Linux, and no thread but this one that could hold a lock at the fork (module doc)."""
    return sys.platform.startswith("linux") and threading.active_count() == 1


@dataclass
class PoolResult:
    """Verdicts in input order, plus which samples timed out or raised."""

    verdicts: list[bool]
    timed_out: list[int] = field(default_factory=list)
    errors: dict[int, str] = field(default_factory=dict)


@dataclass
class _Worker:
    process: multiprocessing.process.BaseProcess
    conn: Connection
    index: int | None = None
    started: float = 0.0


class VerifierPool:
    """``VerifierPool(workers, timeout_s).verify(pairs) -> PoolResult``; use as a context manager."""

    def __init__(self, workers: int = settings.VERIFIER.workers, timeout_s: float = settings.VERIFIER.math_timeout_s,
                 verifier: str = settings.VERIFIER.verifier) -> None:
        if workers < 1:
            raise ValueError(f"need at least one worker, got {workers}")
        if timeout_s <= 0:
            raise ValueError(f"timeout must be positive, got {timeout_s}")
        self.workers, self.timeout_s, self.verifier = workers, timeout_s, verifier
        self._context = multiprocessing.get_context("spawn")  # where forking is not safe (module doc)
        self._pool: list[_Worker] = []

    def __enter__(self) -> VerifierPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def start(self) -> None:
        """Start all the workers now (``verify`` otherwise starts them when it first needs them)."""
        self._grow(self.workers)

    def _grow(self, size: int) -> None:
        """Start workers until the pool has ``size``, and wait until each has loaded the verifier."""
        fresh = [self._start() for _ in range(size - len(self._pool))]
        for worker in fresh:
            self._wait_ready(worker)
        self._pool.extend(fresh)

    def _start(self) -> _Worker:
        forked = fork_is_safe()
        context = multiprocessing.get_context("fork") if forked else self._context
        parent, child = context.Pipe()
        process = context.Process(target=_serve, args=(child, self.verifier, forked), daemon=True)
        process.start()
        child.close()
        return _Worker(process, parent)

    def _wait_ready(self, worker: _Worker) -> None:
        """Block until the worker has loaded (and warmed up) the verifier: start-up is not a timeout."""
        if not worker.conn.poll(120) or worker.conn.recv() != "ready":
            self._kill(worker)
            raise RuntimeError(f"verifier worker for {self.verifier} did not start")

    def _kill(self, worker: _Worker) -> None:
        worker.process.kill()
        worker.process.join()
        worker.conn.close()

    def close(self) -> None:
        for worker in self._pool:
            try:
                worker.conn.send(None)
            except OSError:
                pass
        for worker in self._pool:
            worker.process.join(timeout=2)
            if worker.process.is_alive():
                self._kill(worker)
            else:
                worker.conn.close()
        self._pool = []

    def verify(self, pairs: Sequence[tuple[str, object]]) -> PoolResult:
        """Verdict of ``verifier(text, gold)`` for each ``(text, gold)`` pair."""
        result = PoolResult(verdicts=[False] * len(pairs))
        pending = deque(range(len(pairs)))
        self._grow(min(self.workers, max(1, len(pairs))))
        busy: dict[Connection, _Worker] = {}
        retried: set[int] = set()
        while pending or busy:
            self._dispatch(pairs, pending, busy)
            now = time.monotonic()
            deadline = min(w.started + self.timeout_s for w in busy.values())
            for conn in wait(list(busy), timeout=max(0.0, deadline - now)):
                worker = busy.pop(conn)
                try:
                    index, verdict, error = conn.recv()
                except (EOFError, OSError):  # the worker died (killed from outside, OOM): retry its sample once
                    index = worker.index
                    self._replace(worker)
                    if index not in retried:
                        retried.add(index)
                        pending.appendleft(index)
                        continue
                    verdict, error = False, "worker process died twice on this sample"
                result.verdicts[index] = verdict
                if error is not None:
                    result.errors[index] = error
                worker.index = None
            now = time.monotonic()
            for conn, worker in list(busy.items()):
                if now - worker.started > self.timeout_s:
                    busy.pop(conn)
                    result.timed_out.append(worker.index)
                    self._replace(worker)
        return result

    def _dispatch(self, pairs: Sequence[tuple[str, object]], pending: deque, busy: dict[Connection, _Worker]) -> None:
        """Give each idle worker the next pending sample. A worker that died while idle (killed from outside:
        Slurm's SIGTERM reaches every process of a job) is found by the failed send and replaced first."""
        for position in range(len(self._pool)):
            worker = self._pool[position]
            while worker.index is None and pending:
                text, gold = pairs[pending[0]]
                try:
                    worker.conn.send((pending[0], text, gold))
                except OSError:
                    self._replace(worker)
                    worker = self._pool[position]
                    continue
                worker.index, worker.started = pending.popleft(), time.monotonic()
                busy[worker.conn] = worker

    def _replace(self, worker: _Worker) -> None:
        self._kill(worker)
        fresh = self._start()
        self._wait_ready(fresh)
        self._pool[self._pool.index(worker)] = fresh
