"""LiveCodeBench grading rules, one test per rule: the sandbox's verdict is lcb_runner's.

lcb_runner (LiveCodeBench's official grader) is not installable here (no package on PyPI, and its code
cannot be vendored), so each rule it applies is written down in docs/evaluation.md ("LiveCodeBench
grading: lcb_runner's rules and ours") and checked here on programs whose lcb_runner verdict is known.
The file and function of lcb_runner each rule comes from is named in the test's docstring.
"""

from __future__ import annotations

import pytest

from balagg.evaluation.verify.sandbox import Sandbox, SandboxLimits, extract_code, isolation_mode, outputs_match

pytestmark = pytest.mark.skipif(isolation_mode() != "namespaces", reason="needs root and unshare")

TIMEOUT_S = 2.0


@pytest.fixture(scope="module")
def sandbox():
    return Sandbox(SandboxLimits(timeout_s=TIMEOUT_S))


def stdin(*pairs):
    return [{"input": i, "output": o, "testtype": "stdin"} for i, o in pairs]


def functional(*pairs):
    return [{"input": i, "output": o, "testtype": "functional"} for i, o in pairs]


def verdict(sandbox, code, tests, fn_name=None):
    result = sandbox.run(code, tests, fn_name)
    return result.passed, result.reason


# --- the import block (testing_util.import_string) --------------------------------------------------

@pytest.mark.parametrize("code", [
    "a, b = map(int, sys.stdin.readline().split())\nprint(a + b)\n",
    "print(Counter(input().split())['1'] + 2)\n",
    "print(list(accumulate([1, 2]))[-1] * len(deque([1])))\n",
    "print(gcd(6, 9))\n",
])
def test_stdin_programs_get_the_import_block(sandbox, code):
    """grade_stdio -> make_function: stdin programs run after lcb_runner's import block too, so names
    it imports (sys, Counter, accumulate, gcd ...) need no import of their own."""
    assert verdict(sandbox, code, stdin(("1 2\n", "3\n"))) == (True, "")


@pytest.mark.parametrize("body, out", [
    ("return deepcopy(a)", "[1, 2, 3]"),
    ("return median(a)", "2"),
    ("return datetime.date(2024, 1, a[0]).day", "1"),
    ("return mean(a) + comb(3, 1) + len(ascii_lowercase)", "31"),
    ("return loads(dumps(a))", "[1, 2, 3]"),
    ("return choice([7]) + pow(2, 3, 5)", "10"),
])
def test_call_based_programs_get_the_whole_import_block(sandbox, body, out):
    """grade_call_based: ``import_string`` (copy, statistics, datetime, random, json, string ... star
    imports, then the modules) comes before the program."""
    code = f"class Solution:\n    def f(self, a):\n        {body}\n"
    assert verdict(sandbox, code, functional(("[1, 2, 3]", out)), "f") == (True, "")


def test_the_import_block_decides_which_name_wins(sandbox):
    """Later imports in the block shadow earlier ones: ``copy`` and ``datetime`` end as the modules,
    ``pow`` as the builtin (after math's), ``open`` as the builtin (after io's)."""
    assert verdict(sandbox, "print(copy([1]))\n", stdin(("\n", "[1]\n")))[0] is False
    assert verdict(sandbox, "print(datetime.date(2024, 1, 2).day)\n", stdin(("\n", "2\n")))[0] is True
    assert verdict(sandbox, "print(pow(2, 10, 1000))\n", stdin(("\n", "24\n")))[0] is True


def test_recursion_limit_is_the_blocks_50000(sandbox):
    """import_string ends with ``sys.setrecursionlimit(50000)``: depth 40000 runs, 60000 fails."""
    code = "def f(n):\n    return 0 if n == 0 else 1 + f(n - 1)\nprint(f(int(input())))\n"
    assert verdict(sandbox, code, stdin(("40000\n", "40000\n"))) == (True, "")
    assert verdict(sandbox, code, stdin(("60000\n", "60000\n"))) == (False, "error")


def test_big_integers_print_up_to_50000_digits(sandbox):
    """compute_code_generation_metrics sets ``sys.set_int_max_str_digits(50000)`` in the grading
    process (inherited by the forked worker): a 6000-digit integer prints."""
    assert verdict(sandbox, "print(10 ** 6000)\n", stdin(("\n", "1" + "0" * 6000 + "\n"))) == (True, "")
    assert verdict(sandbox, "print(10 ** 60000)\n", stdin(("\n", "1\n"))) == (False, "error")


def test_a_future_import_cannot_follow_the_block(sandbox):
    """The block comes first, so ``from __future__ import ...`` is no longer at the file's start: a
    SyntaxError in lcb_runner (a failed sample), in both kinds of problem."""
    code = "from __future__ import annotations\nprint(3)\n"
    assert verdict(sandbox, code, stdin(("\n", "3\n"))) == (False, "syntax_error")
    code = "from __future__ import annotations\nclass Solution:\n    def f(self, a):\n        return a\n"
    assert verdict(sandbox, code, functional(("3", "3")), "f") == (False, "syntax_error")


# --- how a stdin program is run (clean_if_name, make_function, call_method, Capturing) ---------------

@pytest.mark.parametrize("code", [
    "print(3)\nsys.exit(1)\n",
    "print(3)\nexit(2)\n",
    "print(3)\nraise SystemExit('bye')\n",
    "import sys\nsys.stdout.write('3')\nsys.exit(0)\nprint(4)\n",
])
def test_stdin_program_that_exits_non_zero_after_the_answer_passes(sandbox, code):
    """call_method catches SystemExit from the wrapped program and the captured output is compared:
    the exit status is never looked at."""
    assert verdict(sandbox, code, stdin(("\n", "3\n"))) == (True, "")


@pytest.mark.parametrize("code", [
    "print(3)\nquit()\n",  # reliability_guard sets builtins.quit = None
    "import os\nprint(3)\nos._exit(0)\n",  # kills lcb_runner's worker: no result, the sample fails
    "print(3)\nraise ValueError\n",
    "print(3)\nraise KeyboardInterrupt\n",
])
def test_stdin_program_that_dies_after_the_answer_fails(sandbox, code):
    assert verdict(sandbox, code, stdin(("\n", "3\n"))) == (False, "error")


def test_main_guard_runs_only_as_the_last_statement_in_its_exact_form(sandbox):
    """clean_if_name unwraps a last top-level ``if __name__ == '__main__':``; any other guard sees
    ``__name__`` of the grader's module (not __main__), so its body never runs."""
    main = "def main():\n    print(3)\n"
    tests = stdin(("\n", "3\n"))
    assert verdict(sandbox, main + 'if __name__ == "__main__":\n    main()\n', tests) == (True, "")
    assert verdict(sandbox, main + "if '__main__' == __name__:\n    main()\n", tests) == (False, "wrong_answer")
    assert verdict(sandbox, main + "if __name__ == '__main__':\n    main()\nx = 1\n", tests) == (False, "wrong_answer")


def test_stdin_program_body_is_a_function_so_top_level_global_names_are_locals(sandbox):
    """make_function moves every statement but the imports into ``def wrapped_function():``: a
    function declaring ``global cnt`` for a top-level ``cnt`` finds no such global (NameError)."""
    code = "cnt = 0\ndef f():\n    global cnt\n    cnt += 1\nf()\nprint(cnt)\n"
    assert verdict(sandbox, code, stdin(("\n", "1\n"))) == (False, "error")
    assert verdict(sandbox, "", stdin(("\n", "\n"))) == (False, "syntax_error")  # empty function body
    assert verdict(sandbox, "import sys\n", stdin(("\n", "\n"))) == (False, "syntax_error")


def test_stdin_tests_share_one_process_in_order(sandbox):
    """grade_stdio calls the same compiled function for every test in one process: module globals
    (set through ``global``) carry over from one test to the next."""
    code = ("def bump():\n    global seen\n    try:\n        seen += 1\n    except NameError:\n"
            "        seen = 1\n    return seen\nprint(bump())\n")
    assert verdict(sandbox, code, stdin(("\n", "1\n"))) == (True, "")
    result = sandbox.run(code, stdin(("\n", "1\n"), ("\n", "1\n")))
    assert (result.passed, result.reason, result.statuses) == (False, "wrong_answer", ["ok", "ok"])
    assert sandbox.run(code, stdin(("\n", "1\n"), ("\n", "2\n"))).passed


def test_a_stdin_program_whose_text_has_class_solution_fails(sandbox):
    """compile_code is shared by both kinds: when the text it runs contains ``class Solution`` it makes
    ``Solution()`` from the module, which a stdin program (whose statements are inside the wrapper) never
    has. The text is the rewritten one, so a comment saying ``class Solution`` is gone by then."""
    tests = stdin(("1 2\n", "3\n"))
    body = "a, b = map(int, input().split())\nprint(a + b)\n"
    assert verdict(sandbox, "class Solution:\n    def go(self):\n        " + body.replace("\n", "\n        ")
                   + "\nSolution().go()\n", tests) == (False, "error")
    assert verdict(sandbox, "class SolutionHelper:\n    pass\n" + body, tests) == (False, "error")
    assert verdict(sandbox, "# no class Solution here\n" + body, tests) == (True, "")


@pytest.mark.parametrize("code, output, passed", [
    ("print(input())\n", "1 2", True),
    ("import sys\nprint(sys.stdin.read().split()[1])\n", "2", True),
    ("import sys\nprint(sys.stdin.read(1).split()[1])\n", "2", True),  # read(n) returns everything
    ("import sys\nprint(repr(sys.stdin.readline()))\n", "'1 2'", False),  # keeps its '\n' ...
    ("import sys\nprint(repr(sys.stdin.readline().strip()))\n", "'1 2'", True),
    ("from sys import stdin\nprint(repr(stdin.readline()))\n", "'1 2'", True),  # ... this one does not
    ("print(repr(stdin.readline()))\n", "'1 2'", True),  # the block's `from sys import *` stdin
    ("import sys\nprint(sys.stdin.readlines()[0])\n", "1 2", True),
    ("import sys\nprint(sys.stdin.buffer.read().split()[1].decode())\n", "2", True),
    ("import sys\nfor line in sys.stdin:\n    print(line.split()[1])\n", "2", False),  # not iterable
    ("print(open(0).read().split()[1])\n", "2", False),  # the real stdin is empty
    ("import os\nprint(os.read(0, 100).split()[1].decode())\n", "2", False),
])
def test_how_a_stdin_program_sees_its_input(sandbox, code, output, passed):
    """call_method: ``sys.stdin`` is a stand-in (read, readline, readlines and buffer; not iterable),
    while the process's real stdin is empty; only its read/readline/readlines methods are swapped for
    the input's, which give lines without their '\\n'. The test input is '1 2\\n'."""
    assert verdict(sandbox, code, stdin(("1 2\n", output + "\n")))[0] is passed


def test_stdin_readlines_and_buffer_readline_are_lcb_runners(sandbox):
    """``sys.stdin.readlines()`` is ``input.split('\\n')`` (no newlines, a last ''); and
    ``sys.stdin.buffer.readline()`` returns the first line every time."""
    tests = stdin(("1\n2\n", "['1', '2', '']\n"))
    assert verdict(sandbox, "import sys\nprint(sys.stdin.readlines())\n", tests) == (True, "")
    code = ("import sys\ninput = sys.stdin.buffer.readline\nn = int(input())\n"
            "print(sum(int(input()) for _ in range(n)))\n")
    assert verdict(sandbox, code, stdin(("2\n5\n7\n", "12\n"))) == (False, "wrong_answer")
    assert verdict(sandbox, code, stdin(("2\n2\n7\n", "4\n"))) == (True, "")


def test_reading_past_the_input_is_an_error(sandbox):
    assert verdict(sandbox, "print(input())\nprint(input())\n", stdin(("x\n", "x\n"))) == (False, "error")


@pytest.mark.parametrize("code, result", [
    ("import sys\nsys.stdout.write('3\\n')\n", (True, "")),
    ("print(3, flush=True)\n", (True, "")),
    ("from sys import stdout\nstdout.write('3\\n')\n", (False, "wrong_answer")),  # bound before capture
    ("import os\nos.write(1, b'3\\n')\n", (False, "wrong_answer")),
    ("import sys\nsys.stdout.buffer.write(b'3\\n')\n", (False, "error")),  # a StringIO has no buffer
    ("import sys\nprint(3)\nsys.stdout.close()\n", (False, "error")),  # Capturing's close takes an argument
])
def test_what_counts_as_a_stdin_programs_output(sandbox, code, result):
    """Capturing swaps ``sys.stdout`` for a StringIO while the program runs; only what reaches it
    counts."""
    assert verdict(sandbox, code, stdin(("\n", "3\n"))) == result


def test_thread_output_counts_only_if_joined(sandbox):
    joined = "import threading\nt = threading.Thread(target=lambda: print(3))\nt.start()\nt.join()\n"
    assert verdict(sandbox, joined, stdin(("\n", "3\n"))) == (True, "")
    late = "import threading, time\nt = threading.Thread(target=lambda: (time.sleep(0.3), print(3)))\nt.start()\n"
    assert verdict(sandbox, late, stdin(("\n", "3\n"))) == (False, "wrong_answer")


@pytest.mark.parametrize("code", [
    "import resource\nprint(3)\n",  # reliability_guard: sys.modules['resource'] = None
    "import os\nos.getcwd()\nprint(3)\n",
    "import os\nos.remove('x')\nprint(3)\n",
    "import shutil\nshutil.rmtree('x')\nprint(3)\n",
    "help()\nprint(3)\n",
])
def test_functions_lcb_runners_guard_disables_fail(sandbox, code):
    """reliability_guard sets os.getcwd, os.remove, shutil.rmtree, help, quit ... to None and blocks some
    modules: a program that uses them fails in lcb_runner, so it fails here."""
    assert verdict(sandbox, code, stdin(("\n", "3\n")))[0] is False


# --- how stdout is compared (grade_stdio, get_stripped_lines, convert_line_to_decimals) ------------

@pytest.mark.parametrize("expected, actual, same", [
    ("3\n", "3", True),
    ("1 2\n3", " 1 2 \n3\n", True),
    ("1\n2\n", "1\r\n2\r\n", True),  # each line is stripped, '\r' with it
    ("1\n\n2", "1\n2", False),  # empty lines inside count
    ("1\n2", "1\n2\n3", False),  # as many lines: an extra last line fails
    ("1\n2\n3", "1\n2", False),  # and a missing one
    ("", "\n\n", True),
    ("1\n2", "1\x0c2", False),  # lines are split on '\n' only
    ("1.0", "1", True),  # a line whose tokens all read as decimals compares as decimals
    ("1.5 2", "1.50  2.0", True),
    ("100", "1e2", True),
    ("0.3", "0.30000000000000004", False),  # no tolerance: exact decimal values
    ("YES 1", "YES 1.0", False),  # one non-number token: the line compares as text
    ("a b", "a  b", False),
    ("1 2", "1   2", True),
    ("NaN", "NaN", True),
    ("NaN", "nan", False),
    ("1", "sNaN", False),
])
def test_stdout_comparison(expected, actual, same):
    assert outputs_match(expected, actual, "stdin") is same


# --- call-based problems (grade_call_based, compile_code, get_function) ----------------------------

def test_class_solution_is_looked_for_by_text_and_made_once(sandbox):
    """compile_code: if the text ``class Solution`` occurs, ``Solution()`` is made once and its method
    called for every test (state on it carries over); otherwise fn_name is a module-level function."""
    counter = ("class Solution:\n    def __init__(self):\n        self.calls = 0\n"
               "    def f(self, a):\n        self.calls += 1\n        return self.calls\n")
    assert verdict(sandbox, counter, functional(("0", "1"), ("0", "2")), "f") == (True, "")
    assert verdict(sandbox, counter, functional(("0", "1"), ("0", "1")), "f") == (False, "wrong_answer")
    assert verdict(sandbox, "def f(a):\n    return a\n", functional(("3", "3")), "f") == (True, "")
    assert verdict(sandbox, "# no class Solution here\ndef f(a):\n    return a\n",
                   functional(("3", "3")), "f") == (False, "error")
    assert verdict(sandbox, "class Solution:\n    def g(self, a):\n        return a\n",
                   functional(("3", "3")), "f") == (False, "error")


@pytest.mark.parametrize("value, expected, same", [
    ("(a, a)", "[3, 3]", True),  # a returned tuple becomes a list ...
    ("[(a, a)]", "[[3, 3]]", False),  # ... only at the top
    ("3.0", "3", True),  # Python ==
    ("True", "1", True),
    ("1", "true", True),
    ("{1: 2}", '{"1": 2}', False),
    ("{'x': a}", '{"x": 3}', True),
    ("defaultdict(int, x=a)", '{"x": 3}', True),
    ("{a}", "[3]", False),
    ("None", "null", True),
    ("'3'", "3", False),
    ("[a, [a]]", "[3, [3]]", True),
    ("iter([a])", "[3]", False),
    ("float('inf')", "Infinity", True),
])
def test_call_based_value_is_compared_with_python_equality(sandbox, value, expected, same):
    """grade_call_based: ``prediction == json.loads(output)`` after a top-level tuple is made a list."""
    code = f"class Solution:\n    def f(self, a):\n        return {value}\n"
    assert verdict(sandbox, code, functional(("3", expected)), "f") == ((True, "") if same else (False, "wrong_answer"))


def test_call_based_input_lines_are_all_json(sandbox):
    """Each line of a functional input is one argument, ``json.loads``-ed; a line that is not JSON (an
    empty last line too) fails the sample, whatever the program."""
    code = "class Solution:\n    def f(self, a, b):\n        return a + b\n"
    assert verdict(sandbox, code, functional(("[1]\n[2]", "[1, 2]")), "f") == (True, "")
    assert verdict(sandbox, code, functional(("[1]\n[2]\n", "[1, 2]")), "f") == (False, "bad_test")
    assert verdict(sandbox, code, functional(("[1]\n[2]", "not json")), "f") == (False, "bad_test")


@pytest.mark.parametrize("body", ["sys.exit(0)", "exit()", "quit()", "raise SystemExit(3)", "return 1 / 0"])
def test_call_based_method_that_exits_or_raises_fails(sandbox, body):
    """SystemExit is not an Exception: in grade_call_based it kills lcb_runner's worker (no result)."""
    code = f"class Solution:\n    def f(self, a):\n        {body}\n"
    assert verdict(sandbox, code, functional(("3", "3")), "f") == (False, "error")


def test_call_based_print_and_main_guard_do_not_matter(sandbox):
    code = ("class Solution:\n    def f(self, a):\n        print('noise')\n        return a\n"
            "if __name__ == '__main__':\n    raise SystemExit(1)\n")
    assert verdict(sandbox, code, functional(("3", "3")), "f") == (True, "")


def test_fn_name_decides_the_kind_of_problem(sandbox):
    """run_test: a problem is call-based iff its ``fn_name`` is set; the tests' testtype is not read."""
    code = "class Solution:\n    def f(self, a):\n        return a + 1\n"
    assert verdict(sandbox, code, stdin(("3", "4")), "f") == (True, "")


# --- time -------------------------------------------------------------------------------------------

def test_timeout_is_per_test(sandbox):
    """grade_stdio / grade_call_based: ``signal.alarm(timeout)`` around each test: tests that each take
    most of the timeout pass together."""
    code = f"import time\ntime.sleep({TIMEOUT_S * 0.6})\nprint(input())\n"
    assert verdict(sandbox, code, stdin(*[("x\n", "x\n")] * 3)) == (True, "")
    code = (f"class Solution:\n    def f(self, a):\n        import time\n        time.sleep({TIMEOUT_S * 0.6})\n"
            "        return a\n")
    assert verdict(sandbox, code, functional(*[("1", "1")] * 3), "f") == (True, "")


def test_slow_module_level_code_of_a_call_based_program_times_out(sandbox):
    """compile_code runs the module under its own ``signal.alarm(timeout)``."""
    code = "import time\ntime.sleep(60)\nclass Solution:\n    def f(self, a):\n        return a\n"
    result = sandbox.run(code, functional(("1", "1")), "f")
    assert not result.passed and result.reason == "timeout"


# --- extraction (lcb_runner/utils/extraction_utils.py: extract_code) -------------------------------

@pytest.mark.parametrize("text, code", [
    ("```python\nprint(1)\n```\nthen\n```\nprint(2)\n```", "print(2)"),
    ("```python\nprint(1)\n```\nsample output:\n```text\n3\n```", "3"),  # the last block, any language
    ("```python\nx = '```'\nprint(2)\n```", "print(2)"),  # every line holding ``` is a fence
    ("```python\nprint(1)\n``` and more text", "print(1)"),
    ("intro ```python\nprint(1)\n```", "print(1)"),
    ("```python\n```", ""),
    ("no code here", None),
    ("```python\nprint(1)\n", None),  # one fence line: no code
])
def test_extract_code_takes_the_lines_between_the_last_two_fence_lines(text, code):
    assert extract_code(text) == code


def test_numpy_imports_as_in_lcb_runners_process(sandbox):
    """lcb_runner's grading process has numpy imported before its guard, so ``import numpy`` works
    there (importing it under the guard would fail: numpy calls os.putenv)."""
    pytest.importorskip("numpy")
    code = "import numpy as np\nprint(np.array(input().split(), dtype=np.int64).sum())\n"
    assert verdict(sandbox, code, stdin(("1 2\n", "3\n"))) == (True, "")
    code = "import numpy as np\nclass Solution:\n    def f(self, a):\n        return np.int64(a) * 2\n"
    assert verdict(sandbox, code, functional(("2", "4")), "f") == (True, "")
