"""The code sandbox: correct programs pass, and every hostile program ends as a failed sample in time.

Runs only where namespaces can be created (root + util-linux unshare, as on this machine and in CI);
elsewhere the sandbox refuses to run, which ``test_refuses_weak_mode_as_root`` / the skip make visible.
"""

from __future__ import annotations

import os
import socket
import time

import pytest

from balagg.evaluation.verify.sandbox import Sandbox, SandboxLimits, extract_code, isolation_mode, outputs_match

pytestmark = pytest.mark.skipif(isolation_mode() != "namespaces", reason="needs root and unshare")

LIMITS = SandboxLimits(timeout_s=2.0)
ADD = [{"input": "1 2\n", "output": "3\n", "testtype": "stdin"},
       {"input": "5 7\n", "output": "12", "testtype": "stdin"}]
ADD_CODE = "a, b = map(int, input().split())\nprint(a + b)\n"


@pytest.fixture(scope="module")
def sandbox():
    return Sandbox(LIMITS)


def test_stdin_program_passes_and_wrong_one_fails(sandbox):
    assert sandbox.run(ADD_CODE, ADD).passed
    wrong = sandbox.run("a, b = map(int, input().split())\nprint(a * b)\n", ADD)
    assert not wrong.passed and wrong.reason == "wrong_answer"


def test_problem_passes_only_if_all_tests_pass(sandbox):
    code = "a, b = map(int, input().split())\nprint(3 if a == 1 else 0)\n"
    result = sandbox.run(code, ADD)
    assert not result.passed and result.statuses == ["ok", "ok"]


def test_call_based_program_with_starter_code(sandbox):
    code = ("class Solution:\n    def shift(self, nums: List[int], k: int) -> List[int]:\n"
            "        return [x + k for x in nums]\n")
    tests = [{"input": "[1, 2]\n3", "output": "[4, 5]", "testtype": "functional"},
             {"input": "[]\n1", "output": "[]", "testtype": "functional"}]
    assert sandbox.run(code, tests, fn_name="shift").passed
    assert not sandbox.run(code.replace("x + k", "x - k"), tests, fn_name="shift").passed
    with pytest.raises(ValueError, match="fn_name"):
        sandbox.run(code, tests)


def test_syntax_error_and_exception_fail(sandbox):
    assert sandbox.run("print(", ADD).reason == "syntax_error"
    assert sandbox.run("raise RuntimeError('no')", ADD).reason == "error"
    # SystemExit ends a stdin program normally (lcb_runner's rule): what it printed is what counts
    assert sandbox.run("import sys\nsys.exit(3)", ADD).reason == "wrong_answer"


def test_program_can_use_its_work_dir_and_the_stdlib(sandbox):
    code = ("import os, heapq, fractions\nopen('scratch.txt', 'w').write(input())\n"
            "a, b = map(int, open('scratch.txt').read().split())\nprint(a + b)\n")
    assert sandbox.run(code, ADD).passed


def _timed(sandbox, code, tests=ADD, **kwargs):
    start = time.monotonic()
    result = sandbox.run(code, tests, **kwargs)
    return result, time.monotonic() - start


def test_infinite_loop_times_out(sandbox):
    result, seconds = _timed(sandbox, "while True:\n    pass\n")
    assert not result.passed and result.reason == "timeout"
    assert seconds < LIMITS.timeout_s + 3


@pytest.mark.parametrize("code", [
    "import time\ntime.sleep(60)\n",  # sleeps: no CPU time, so only the wall clock can stop it
    "import os\nr, w = os.pipe()\nos.read(r, 1)\n",  # blocks on a pipe nobody writes to
    "import sys\nsys.stdin.read()\nimport time\ntime.sleep(60)\n",
])
def test_a_program_that_waits_without_using_cpu_ends_as_timeout_within_the_wall_clock_limit(sandbox, code):
    result, seconds = _timed(sandbox, code)
    assert not result.passed and result.reason == "timeout"
    assert seconds < LIMITS.timeout_s + 3


# lcb_runner's guard sets os.fork, os.kill ... to None (the sandbox does too, for equal verdicts); the
# programs below use posix.* to get past it, as a hostile program would, so the real limits are tested.

def test_fork_bomb_is_contained(sandbox):
    code = "import posix\nwhile True:\n    try:\n        posix.fork()\n    except OSError:\n        pass\n"
    result, seconds = _timed(sandbox, code)
    # the launcher's own timeout ends it, not the parent's backstop ((timeout + 1) x 3 + 10 s = 19 s here);
    # the slack is for the kernel reaping the bomb's processes, which takes seconds on a busy machine
    assert not result.passed and seconds < LIMITS.timeout_s + 6
    time.sleep(0.2)
    assert _processes_of_this_process_sandboxes() == []  # nothing of the bomb survives the sandbox


def _processes_of_this_process_sandboxes() -> list[str]:
    """The live processes running as one of the uids this process gives its sandboxes (UID_BASE + a
    block of 1000 per calling process, sandbox.py): not another test process's sandboxes running beside."""
    from balagg.evaluation.verify.sandbox import UID_BASE

    first = UID_BASE + (os.getpid() % 1000) * 1000
    return [pid for pid in os.listdir("/proc") if pid.isdigit() and first <= _uid(pid) < first + 1000]


def _uid(pid: str) -> int:
    try:
        with open(f"/proc/{pid}/status") as handle:
            return int(next(line for line in handle if line.startswith("Uid:")).split()[1])
    except (OSError, StopIteration):
        return -1


def test_process_limit_binds(sandbox):
    code = ("import os, posix, time\nn = 0\nfor _ in range(200):\n    try:\n        pid = posix.fork()\n"
            "    except OSError:\n        break\n    if pid == 0:\n        time.sleep(1)\n        os._exit(0)\n"
            "    n += 1\nprint(n)\n")
    result = sandbox.run(code, [{"input": "", "output": "200", "testtype": "stdin"}])
    assert not result.passed and result.reason == "wrong_answer"


def test_huge_allocation_fails(sandbox):
    result, seconds = _timed(sandbox, "x = bytearray(10 * 1024 ** 3)\nprint(3)\n",
                             [{"input": "", "output": "3", "testtype": "stdin"}])
    assert not result.passed and result.reason == "error" and seconds < LIMITS.timeout_s + 3


def test_cannot_write_outside_the_work_dir(sandbox, tmp_path):
    targets = [str(tmp_path / "escaped.txt"), "/tmp/balagg-sandbox-escape.txt"]
    code = "".join(f"open({t!r}, 'w').write('x')\n" for t in targets) + "print(3)\n"
    result = sandbox.run(code, [{"input": "", "output": "3", "testtype": "stdin"}])
    assert not result.passed and result.reason == "error"
    assert not any(os.path.exists(t) for t in targets)


def test_cannot_open_a_socket(sandbox):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]
    code = (f"import socket\ns = socket.create_connection(('127.0.0.1', {port}), timeout=1)\n"
            "s.sendall(b'leak')\nprint(3)\n")
    result = sandbox.run(code, [{"input": "", "output": "3", "testtype": "stdin"}])
    server.setblocking(False)
    with pytest.raises(BlockingIOError):  # a connection would wait in the backlog even unaccepted
        server.accept()
    server.close()
    assert not result.passed and result.reason == "error"


def test_cannot_read_the_host_environment(sandbox, monkeypatch):
    monkeypatch.setenv("BALAGG_TEST_SECRET", "hunter2")
    code = ("import os\nfound = os.environ.get('BALAGG_TEST_SECRET', '')\n"
            f"for path in ('/proc/{os.getpid()}/environ', '/proc/1/environ'):\n"
            "    try:\n        found += open(path, 'rb').read().decode(errors='ignore')\n"
            "    except OSError:\n        pass\nprint('hunter2' if 'hunter2' in found else 'nothing')\n")
    result = sandbox.run(code, [{"input": "", "output": "hunter2", "testtype": "stdin"}])
    assert not result.passed and result.reason == "wrong_answer"


def test_cannot_kill_the_evaluator(sandbox):
    code = (f"import os, posix, signal\nposix.kill({os.getpid()}, signal.SIGKILL)\n"
            "posix.kill(os.getppid(), signal.SIGKILL)\nposix.killpg(0, signal.SIGKILL)\nprint(3)\n")
    result = sandbox.run(code, [{"input": "", "output": "3", "testtype": "stdin"}])
    assert not result.passed
    assert sandbox.run(ADD_CODE, ADD).passed  # and we are still here, scoring


def test_printing_a_gigabyte_is_cut_off(sandbox):
    code = "import sys\nchunk = 'x' * (1 << 20)\nfor _ in range(1024):\n    sys.stdout.write(chunk)\n"
    result, seconds = _timed(sandbox, code, [{"input": "", "output": "x", "testtype": "stdin"}])
    assert not result.passed and result.reason == "output_limit" and seconds < LIMITS.timeout_s + 3


def test_refuses_weak_mode_as_root():
    if os.geteuid() != 0:
        pytest.skip("only root is refused")
    with pytest.raises(RuntimeError, match="root"):
        Sandbox(LIMITS, allow_weak=True, mode="rlimits")
    with pytest.raises(RuntimeError, match="allow_weak"):
        Sandbox(LIMITS, mode="rlimits")


def test_extract_code_takes_the_last_block():
    text = "```python\nprint(1)\n```\nthen\n```\nnot python?\n```\nfinally\n```python\nprint(2)\n```"
    assert extract_code(text) == "print(2)"
    assert extract_code("```\nprint(3)\n```") == "print(3)"
    assert extract_code("no code here") is None


@pytest.mark.parametrize("expected, actual, kind, same", [
    ("3\n", "3", "stdin", True),
    ("1 2\n3", " 1 2 \n3\n", "stdin", True),
    ("1.0", "1", "stdin", True),
    ("1.5", "1.50", "stdin", True),
    ("YES", "NO", "stdin", False),
    ("1\n2", "1", "stdin", False),
    ("[4, 5]", '["l", [4, 5]]', "functional", True),  # functional: the launcher's encoded return value
    ("[4, 5]", '["t", [4, 5]]', "functional", True),
    ("[4, 5]", '["l", [5, 4]]', "functional", False),
    ("true", "true", "functional", True),
    ("5", "not json", "functional", False),
    ("5", '["x", "Anything"]', "functional", False),
    ("5", '["?", [5]]', "functional", False),
])
def test_outputs_match(expected, actual, kind, same):
    assert outputs_match(expected, actual, kind) is same


def test_large_input_and_output(sandbox):
    numbers = list(range(50_000))
    test = {"input": f"{len(numbers)}\n" + " ".join(map(str, numbers)) + "\n",
            "output": "\n".join(str(2 * x) for x in numbers), "testtype": "stdin"}
    code = "n = int(input())\nprint('\\n'.join(str(2 * int(x)) for x in input().split()))\n"
    assert len(test["input"]) > 60_000
    assert sandbox.run(code, [test]).passed


def test_mixed_test_types_are_refused(sandbox):
    with pytest.raises(ValueError, match="all functional or all stdin"):
        sandbox.run("pass", [ADD[0], {"input": "1", "output": "1", "testtype": "functional"}], fn_name="f")


def test_processes_left_behind_die_with_the_sandbox(sandbox):
    """Detached (setsid, fds closed) children that outlive their test are gone once the run ends."""
    code = ("import os, posix, time\nfor _ in range(5):\n    if posix.fork() == 0:\n"
            "        os.setsid()\n        os.closerange(0, 256)\n        time.sleep(60)\n        os._exit(0)\n"
            "a, b = map(int, input().split())\nprint(a + b)\n")
    result = sandbox.run(code, ADD)
    assert result.statuses == ["ok", "ok"] and result.passed
    time.sleep(0.2)
    assert _processes_of_this_process_sandboxes() == []


# --- no broken program is accepted --------------------------------------------------------------

def test_a_returned_object_that_claims_equality_is_a_wrong_answer(sandbox):
    """Return values are compared outside the sandbox as type-tagged data, so a program-defined __eq__
    is never called (lcb_runner calls it, in its grading process: there this program passes)."""
    code = ("class Anything:\n    def __eq__(self, other):\n        return True\n"
            "class Solution:\n    def f(self, a):\n        return Anything()\n")
    result = sandbox.run(code, [{"input": "1", "output": "2", "testtype": "functional"}], fn_name="f")
    assert not result.passed and result.reason == "wrong_answer"


def test_the_program_cannot_find_the_expected_output(sandbox):
    """The expected outputs never enter the sandbox: a search of the process's memory finds nothing."""
    code = ("import gc\ntoken = 'balagg' + '-secret'\nhits = []\nfor o in gc.get_objects():\n"
            "    items = o.values() if isinstance(o, dict) else o if isinstance(o, (list, tuple, set)) else ()\n"
            "    try:\n        hits += [x for x in items if isinstance(x, str) and token in x]\n"
            "    except Exception:\n        pass\nprint(max(hits, key=len) if hits else 'nothing')\n")
    result = sandbox.run(code, [{"input": "\n", "output": "balagg-secret-42", "testtype": "stdin"}])
    assert not result.passed and result.reason == "wrong_answer"


@pytest.mark.parametrize("fn_name, code, expected", [
    (None, "print(input())\n", "1"),
    ("f", "class Solution:\n    def f(self, a):\n        return a\n", "1"),
])
def test_right_on_one_test_wrong_on_the_next_fails(sandbox, fn_name, code, expected):
    kind = "stdin" if fn_name is None else "functional"
    tests = [{"input": "1", "output": expected, "testtype": kind}, {"input": "2", "output": "3", "testtype": kind}]
    result = sandbox.run(code, tests, fn_name)
    assert not result.passed and result.reason == "wrong_answer" and result.statuses == ["ok", "ok"]


def test_a_later_test_that_times_out_fails_the_problem(sandbox):
    code = "x = int(input())\nwhile x == 2:\n    pass\nprint(x)\n"
    tests = [{"input": f"{x}\n", "output": f"{x}\n", "testtype": "stdin"} for x in (1, 2, 3)]
    result, seconds = _timed(sandbox, code, tests)
    assert (result.passed, result.reason, result.statuses) == (False, "timeout", ["ok", "timeout"])
    assert seconds < 2 * LIMITS.timeout_s + 3


def test_endless_printing_is_cut_off(sandbox):
    result, seconds = _timed(sandbox, "while True:\n    print('x' * 1000)\n",
                             [{"input": "", "output": "1", "testtype": "stdin"}])
    assert not result.passed and result.reason == "output_limit" and seconds < LIMITS.timeout_s + 3


def test_a_huge_return_value_is_cut_off(sandbox):
    code = "class Solution:\n    def f(self, a):\n        return 'x' * (9 << 20)\n"
    result = sandbox.run(code, [{"input": "1", "output": "1", "testtype": "functional"}], fn_name="f")
    assert not result.passed and result.reason == "output_limit"
