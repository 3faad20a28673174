"""Run untrusted model-written programs (LiveCodeBench answers) against their tests, in isolation,
with LiveCodeBench's own grading rules.

One sample = one sandbox: a separate process tree started as

    unshare --net --mount --pid --fork --kill-child  python -I -B sandbox_launcher.py

with an empty environment. The launcher (see :mod:`balagg.evaluation.verify.sandbox_launcher`) is PID 1 of a
new PID namespace, so every process the program starts dies with it; the network namespace has no
usable interface; all mounts are remounted read-only in its private mount namespace and the working
directory is a fresh size-limited tmpfs (the host directory stays empty). It then drops to an
unprivileged uid of its own -- needed because RLIMIT_NPROC does not bind root -- sets hard limits on
address space, processes, file size and open files, and runs the program in one forked child with a
CPU-time limit, a wall-clock timeout per test (6 s default, LiveCodeBench's) and a cap on the output of
each test. This parent enforces an overall deadline as a backstop and kills the whole tree.

``isolation_mode()``: ``namespaces`` where this works (root and util-linux ``unshare``); otherwise the
sandbox refuses to run unless ``allow_weak=True``, which runs the same launcher, as the calling
(non-root) user, with rlimits only and the program's sockets and subprocesses refused by an audit hook
-- a weaker guarantee: no filesystem confinement, and a process that calls setsid outlives the run.
As root the weak mode is refused outright, since RLIMIT_NPROC does not bind root.

Grading contract: a sample passes iff LiveCodeBench's grader (lcb_runner: ``extract_code`` in
``lcb_runner/utils/extraction_utils.py``, ``run_test`` in ``lcb_runner/evaluation/testing_util.py``) would
pass it. :func:`extract_code` takes its code; the launcher runs the program as lcb_runner does (the
import block before every program, a stdin program as one function called per test with a stand-in
stdin and a captured stdout, SystemExit as a normal end, a call-based program's ``Solution()`` made once,
all tests in one process, in order); :func:`outputs_match` compares as lcb_runner does (stdout line by
line, stripped, lines of numbers as decimals; return values with ``==`` after a top-level tuple becomes a
list). The problem's ``fn_name`` decides between the two kinds. A problem passes only if every test
passes. The rules, each with the test that checks it, and what still differs: docs/evaluation.md.
Outputs are compared here: the sandbox never sees the expected outputs.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
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

from balagg import settings

log = logging.getLogger(__name__)

LAUNCHER = Path(__file__).with_name("sandbox_launcher.py")
UID_BASE = 2_000_000
"""Sandbox uids are UID_BASE + a per-run offset: unused on the host, one per concurrent run, so the
process limit of one sandbox is not shared with another."""

_run_counter = itertools.count()


@dataclass(frozen=True)
class SandboxLimits:
    """Per-sample limits. ``timeout_s`` is wall-clock per test, and for loading the program before the
    first test; the program's process gets ``(timeout_s + 1) * (tests + 1)`` s of CPU time in all.
    ``max_output_bytes`` is per test (its stdout, or its encoded return value).

    ``memory_mb`` is an address-space limit per process, so one sample can use at most
    ``memory_mb * max_processes`` (16 GiB by default, and only by forking on purpose); a memory cgroup
    would bound the sum but is not used (it needs write access to the host's cgroup tree)."""

    timeout_s: float = settings.VERIFIER.code_timeout_s
    memory_mb: int = 1024
    max_processes: int = 16
    file_size_mb: int = 16
    open_files: int = 64
    max_output_bytes: int = 8 * 1024 * 1024
    workdir_mb: int = 64


@dataclass
class SandboxResult:
    """``passed`` iff every test ran cleanly and matched; ``statuses`` per test run (stops at the first
    failure; one entry if the program failed to load); ``reason`` says why a sample failed: a launcher
    status (``error``, ``timeout``, ``output_limit``, ``syntax_error``), ``wrong_answer``, ``bad_test``
    (call-based tests that are not JSON: no program passes), or ``sandbox_*``/``incomplete``."""

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


FENCE = "```"


def extract_code(text: str) -> str | None:
    """lcb_runner's ``extract_code`` (chat models): the lines between the last two lines that contain
    three backticks anywhere, whatever the language tag; None (no code) if fewer than two lines do, where
    lcb_runner grades an empty program, which fails."""
    lines = text.split("\n")
    fences = [index for index, line in enumerate(lines) if FENCE in line]
    if len(fences) < 2:
        return None
    return "\n".join(lines[fences[-2] + 1:fences[-1]])


def stdout_lines(text: str) -> list[str]:
    """lcb_runner's ``get_stripped_lines``: the text stripped, split on '\\n' only, each line stripped."""
    return [line.strip() for line in text.strip().split("\n")]


def _decimals(line: str) -> list[Decimal] | None:
    try:
        return [Decimal(token) for token in line.split()]
    except (InvalidOperation, ValueError, TypeError):
        return None


def stdout_matches(expected: str, actual: str) -> bool:
    """lcb_runner's ``grade_stdio`` comparison: as many lines (see :func:`stdout_lines`), and each line
    equal as text or, when every whitespace-separated token of both lines reads as a Decimal, as the
    list of those decimals (``1.0`` = ``1``, ``1e2`` = ``100``; no tolerance: ``0.30000000000000004`` is
    not ``0.3``)."""
    want, got = stdout_lines(expected), stdout_lines(actual)
    if len(want) != len(got):
        return False
    for line, wanted in zip(got, want):
        if line == wanted:
            continue
        numbers, wanted_numbers = _decimals(line), _decimals(wanted)
        if numbers is None or wanted_numbers is None:
            return False
        try:
            if numbers != wanted_numbers:
                return False
        except InvalidOperation:  # a signalling NaN
            return False
    return True


class _Opaque:
    """A returned object of a type :func:`sandbox_launcher.encode_value` does not carry: equal to nothing."""

    def __init__(self, name: str) -> None:
        self.name = name


def decode_value(node):
    """The Python value of :func:`sandbox_launcher.encode_value`'s JSON (already parsed); ValueError if
    it is not such a value."""
    if node is None or isinstance(node, (bool, int, float, str)):
        return node
    if not (isinstance(node, list) and len(node) == 2 and isinstance(node[0], str)):
        raise ValueError("not an encoded value")
    tag, body = node
    if tag == "x":
        return _Opaque(str(body))
    if not isinstance(body, list):
        raise ValueError("not an encoded value")
    if tag == "l":
        return [decode_value(item) for item in body]
    if tag == "t":
        return tuple(decode_value(item) for item in body)
    if tag == "s":
        return {decode_value(item) for item in body}
    if tag == "f":
        return frozenset(decode_value(item) for item in body)
    if tag == "d":
        pairs = [pair for pair in body if isinstance(pair, list) and len(pair) == 2]
        if len(pairs) != len(body):
            raise ValueError("not an encoded dict")
        return {decode_value(key): decode_value(item) for key, item in pairs}
    raise ValueError(f"unknown tag {tag!r}")


def return_value_matches(expected, encoded: str) -> bool:
    """lcb_runner's ``grade_call_based`` comparison: ``prediction == expected`` (Python's ``==``, so
    ``3.0 == 3`` and ``True == 1``) after a returned tuple is made a list (only at the top). ``expected``
    is the test's output, ``json.loads``-ed; ``encoded`` what the launcher sent for the return value."""
    try:
        prediction = decode_value(json.loads(encoded))
        if isinstance(prediction, tuple):
            prediction = list(prediction)
        return bool(prediction == expected)
    except (ValueError, TypeError, RecursionError):
        return False


def outputs_match(expected: str, actual: str, testtype: str = "stdin") -> bool:
    """``stdin``: :func:`stdout_matches`; ``functional``: ``expected`` is the test's JSON output and
    ``actual`` the launcher's encoded return value (:func:`return_value_matches`)."""
    if testtype == "functional":
        try:
            wanted = json.loads(expected)
        except (ValueError, RecursionError):
            return False
        return return_value_matches(wanted, actual)
    return stdout_matches(expected, actual)


def _call_based_test_data(tests: list[dict]) -> list | None:
    """The tests' outputs, ``json.loads``-ed, if every output and every line of every input parses as
    JSON (grade_call_based loads them all before the first test); None if one does not."""
    try:
        for test in tests:
            for line in test["input"].split("\n"):
                json.loads(line)
        return [json.loads(test["output"]) for test in tests]
    except (ValueError, RecursionError):
        return None


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
        """Grade ``code`` on ``tests``: call-based iff ``fn_name`` is given (lcb_runner's rule; the tests'
        ``testtype`` only has to be consistent), else stdin/stdout."""
        if not tests:
            raise ValueError("a code problem needs at least one test")
        testtypes = {test.get("testtype", "stdin") for test in tests}
        if len(testtypes) > 1:
            raise ValueError(f"a problem's tests must be all functional or all stdin, got {sorted(testtypes)}")
        if fn_name is None and "functional" in testtypes:
            raise ValueError("functional tests need fn_name")
        expected_values = None
        if fn_name is not None:
            expected_values = _call_based_test_data(tests)
            if expected_values is None:  # no program can pass: lcb_runner fails every sample of it
                return SandboxResult(False, [], "bad_test")
        spec_limits = asdict(self.limits)
        workdir = tempfile.mkdtemp(prefix="balagg-sandbox-")
        os.chmod(workdir, 0o755)
        uid = None  # namespaces mode runs as root until the launcher drops to this uid
        if self.mode == "namespaces":
            uid = UID_BASE + (os.getpid() % 1000) * 1000 + next(_run_counter) % 1000
        spec = {"code": code, "fn_name": fn_name, "inputs": [test["input"] for test in tests],
                "workdir": workdir, "uid": uid, "mode": self.mode, "limits": spec_limits}
        command = [sys.executable, "-I", "-B", str(LAUNCHER)]
        if self.mode == "namespaces":
            command = ["unshare", "--net", "--mount", "--pid", "--fork", "--kill-child", *command]
        # Loading the program and each test get timeout_s each; lcb_runner's own backstop is
        # (timeout + 1) * tests + 5 s for the whole sample.
        budget = (self.limits.timeout_s + 1.0) * (len(tests) + 1) + 10.0
        with tempfile.TemporaryFile() as launcher_errors:  # the launcher's own stderr (never the program's)
            try:
                raw, error = self._communicate(command, json.dumps(spec).encode(), budget,
                                               cap=6 * self.limits.max_output_bytes * len(tests) + (1 << 20),
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
        for index, result in enumerate(results):
            if result["status"] != "ok":
                return SandboxResult(False, statuses, result["status"])
            if index >= len(tests):
                return SandboxResult(False, statuses, "sandbox_failed")
            if fn_name is None:
                matched = stdout_matches(tests[index]["output"], result["output"])
            else:
                matched = return_value_matches(expected_values[index], result["output"])
            if not matched:
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
