"""Run untrusted model-written programs (LiveCodeBench answers) against their tests, in isolation.

One sample = one sandbox: a separate process tree started as

    unshare --net --mount --pid --fork --kill-child  python -I -B sandbox_launcher.py

with an empty environment. The launcher (see :mod:`balagg.evaluation.verify.sandbox_launcher`) is PID 1 of a
new PID namespace, so every process the program starts dies with it; the network namespace has no
usable interface; all mounts are remounted read-only in its private mount namespace and the working
directory is a fresh size-limited tmpfs (the host directory stays empty). It then drops to an
unprivileged uid of its own -- needed because RLIMIT_NPROC does not bind root -- sets hard limits on
address space, processes, file size and open files, and runs the program once per test in a forked
child with a CPU-time limit, a wall-clock timeout (6 s default, LiveCodeBench's) and a cap on the
captured output. This parent enforces an overall deadline as a backstop and kills the whole tree.

``isolation_mode()``: ``namespaces`` where this works (root and util-linux ``unshare``); otherwise the
sandbox refuses to run unless ``allow_weak=True``, which runs the same launcher, as the calling
(non-root) user, with rlimits only and the program's sockets and subprocesses refused by an audit hook
-- a weaker guarantee: no filesystem confinement, and a process that calls setsid outlives the run.
As root the weak mode is refused outright, since RLIMIT_NPROC does not bind root.

A problem passes only if every test passes. Outputs are compared here, not in the sandbox: stdin
problems line by line after stripping (numbers that differ only in formatting, e.g. ``1.0`` vs ``1``,
compare equal as decimals), call-based problems as JSON values.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import re
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from decimal import Decimal, InvalidOperation
from functools import lru_cache
from pathlib import Path

from balagg import contract

log = logging.getLogger(__name__)

LAUNCHER = Path(__file__).with_name("sandbox_launcher.py")
UID_BASE = 2_000_000
"""Sandbox uids are UID_BASE + a per-run offset: unused on the host, one per concurrent run, so the
process limit of one sandbox is not shared with another."""

_run_counter = itertools.count()


@dataclass(frozen=True)
class SandboxLimits:
    """Per-sample limits. ``timeout_s`` is wall-clock per test; CPU time per test is timeout_s + 1.

    ``memory_mb`` is an address-space limit per process, so one sample can use at most
    ``memory_mb * max_processes`` (16 GiB by default, and only by forking on purpose); a memory cgroup
    would bound the sum but is not used (it needs write access to the host's cgroup tree)."""

    timeout_s: float = contract.VERIFIER.code_timeout_s
    memory_mb: int = 1024
    max_processes: int = 16
    file_size_mb: int = 16
    open_files: int = 64
    max_output_bytes: int = 8 * 1024 * 1024
    workdir_mb: int = 64


@dataclass
class SandboxResult:
    """``passed`` iff every test ran cleanly and matched; ``statuses`` per test run (stops at the first
    failure); ``reason`` says why a sample failed."""

    passed: bool
    statuses: list[str] = field(default_factory=list)
    reason: str = ""


@lru_cache(maxsize=1)
def isolation_mode() -> str:
    """``namespaces`` if a trivial program runs correctly in the full namespace sandbox here (root, util-linux
    ``unshare``, and the mounts the launcher makes all work); ``rlimits`` otherwise."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return "rlimits"
    probe = subprocess.run(["unshare", "--net", "--mount", "--pid", "--fork", "--kill-child", "true"],
                           capture_output=True, env={}, timeout=30)
    if probe.returncode != 0:
        return "rlimits"
    result = Sandbox(SandboxLimits(timeout_s=30.0), mode="namespaces").run(
        "print(input())", [{"input": "ok\n", "output": "ok\n", "testtype": "stdin"}])
    return "namespaces" if result.passed else "rlimits"


_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)```", re.DOTALL)


def extract_code(text: str) -> str | None:
    """The last fenced code block (LiveCodeBench's rule), preferring ```python blocks; None if none."""
    blocks = _FENCE.findall(text)
    if not blocks:
        return None
    python = [body for lang, body in blocks if lang.lower() in ("python", "python3", "py")]
    return (python or [body for _, body in blocks])[-1]


def outputs_match(expected: str, actual: str, testtype: str) -> bool:
    """LiveCodeBench's comparison: JSON equality for functional tests; else per stripped line, then per
    whitespace-separated token with a Decimal fallback."""
    if testtype == "functional":
        try:
            return _normalise(json.loads(expected)) == _normalise(json.loads(actual))
        except (json.JSONDecodeError, TypeError):
            return False
    want = [line.strip() for line in expected.strip().splitlines()]
    got = [line.strip() for line in actual.strip().splitlines()]
    if want == got:
        return True
    if len(want) != len(got):
        return False
    for a, b in zip(want, got):
        if a == b:
            continue
        ta, tb = a.split(), b.split()
        if len(ta) != len(tb):
            return False
        try:
            if any(x != y and Decimal(x) != Decimal(y) for x, y in zip(ta, tb)):
                return False
        except InvalidOperation:
            return False
    return True


def _normalise(value):
    if isinstance(value, (list, tuple)):
        return [_normalise(v) for v in value]
    return value


class Sandbox:
    """``Sandbox(limits).run(code, tests, fn_name) -> SandboxResult``; safe to call from several threads."""

    def __init__(self, limits: SandboxLimits = SandboxLimits(), allow_weak: bool = False,
                 mode: str | None = None) -> None:
        self.limits = limits
        self.mode = mode or isolation_mode()
        if self.mode not in ("namespaces", "rlimits"):
            raise ValueError(f"unknown sandbox mode {self.mode!r}")
        if self.mode != "namespaces" and not allow_weak:
            raise RuntimeError("cannot create network/mount/PID namespaces here (needs root and util-linux "
                               "unshare); pass allow_weak=True to run with rlimits and an audit hook only")
        if self.mode != "namespaces" and os.geteuid() == 0:
            raise RuntimeError("the rlimits-only sandbox cannot bound the number of processes of root "
                               "(RLIMIT_NPROC does not bind root): run as an unprivileged user or install "
                               "util-linux unshare")

    def run(self, code: str, tests: list[dict], fn_name: str | None = None) -> SandboxResult:
        if not tests:
            raise ValueError("a code problem needs at least one test")
        testtypes = {test.get("testtype", "stdin") for test in tests}
        if len(testtypes) > 1:
            raise ValueError(f"a problem's tests must be all functional or all stdin, got {sorted(testtypes)}")
        if fn_name is None and "functional" in testtypes:
            raise ValueError("functional tests need fn_name")
        spec_limits = asdict(self.limits)
        workdir = tempfile.mkdtemp(prefix="balagg-sandbox-")
        os.chmod(workdir, 0o755)
        uid = None  # namespaces mode runs as root until the launcher drops to this uid
        if self.mode == "namespaces":
            uid = UID_BASE + (os.getpid() % 1000) * 1000 + next(_run_counter) % 1000
        spec = {"code": code, "fn_name": fn_name if "functional" in testtypes else None,
                "inputs": [test["input"] for test in tests], "workdir": workdir, "uid": uid,
                "mode": self.mode, "limits": spec_limits}
        command = [sys.executable, "-I", "-B", str(LAUNCHER)]
        if self.mode == "namespaces":
            command = ["unshare", "--net", "--mount", "--pid", "--fork", "--kill-child", *command]
        budget = self.limits.timeout_s * len(tests) + 10.0
        with tempfile.TemporaryFile() as launcher_errors:  # the launcher's own stderr (never the program's)
            try:
                raw, error = self._communicate(command, json.dumps(spec).encode(), budget,
                                               cap=self.limits.max_output_bytes * len(tests) + (1 << 20),
                                               stderr=launcher_errors)
            finally:
                shutil.rmtree(workdir, ignore_errors=True)
            if error:
                return SandboxResult(False, [], error)
            try:
                results = json.loads(raw)["results"]
            except (json.JSONDecodeError, KeyError, TypeError):
                launcher_errors.seek(0)
                tail = launcher_errors.read()[-2000:].decode(errors="replace").strip().splitlines()
                log.warning("sandbox launcher failed: %s", tail[-1] if tail else "no message")
                return SandboxResult(False, [], "sandbox_failed")
        statuses = [result["status"] for result in results]
        for test, result in zip(tests, results):
            if result["status"] != "ok":
                return SandboxResult(False, statuses, result["status"])
            if not outputs_match(test["output"], result["output"], test.get("testtype", "stdin")):
                return SandboxResult(False, statuses, "wrong_answer")
        if len(results) < len(tests):
            return SandboxResult(False, statuses, "incomplete")
        return SandboxResult(True, statuses, "")

    @staticmethod
    def _communicate(command: list[str], data: bytes, budget: float, cap: int, stderr=subprocess.DEVNULL
                     ) -> tuple[bytes, str]:
        """Run ``command`` with ``data`` on stdin; its stdout (<= cap bytes) or an error after ``budget`` s."""
        process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                   stderr=stderr, env={}, start_new_session=True, cwd="/")
        deadline = time.monotonic() + budget
        chunks, size, error = [], 0, ""
        try:
            process.stdin.write(data)
            process.stdin.close()
        except BrokenPipeError:
            pass
        with selectors.DefaultSelector() as selector:
            selector.register(process.stdout, selectors.EVENT_READ)
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    error = "sandbox_timeout"
                    break
                if not selector.select(left):
                    continue
                chunk = os.read(process.stdout.fileno(), 1 << 16)
                if not chunk:
                    break
                size += len(chunk)
                if size > cap:
                    error = "sandbox_output_limit"
                    break
                chunks.append(chunk)
        if error:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        process.stdout.close()
        process.wait()
        return b"".join(chunks), error
