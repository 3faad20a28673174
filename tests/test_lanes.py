"""The fast lane (``make test-fast``: ``pytest -m "not slow"``, tests/conftest.py) holds no test that runs
Snakemake, and the conftest's lists name tests that exist."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import SLOW_MODULES, SLOW_TESTS

TESTS = Path(__file__).resolve().parent
SNAKEMAKE_CALLS = {"snakemake", "run_snakemake", "dry_run", "copy_workflow"}
"""What a test calls to run Snakemake (tests/test_workflow.py's helper and the like, its dry-run variants,
the scratch copy of the workflow a run needs)."""


def module_functions(path: Path) -> dict[str, ast.FunctionDef]:
    return {node.name: node for node in ast.parse(path.read_text()).body if isinstance(node, ast.FunctionDef)}


def runs_snakemake(function: ast.FunctionDef, functions: dict[str, ast.FunctionDef], seen: frozenset = frozenset()) -> bool:
    """Whether ``function`` calls a Snakemake helper, directly or through its module's functions, or
    takes a fixture of its module that does."""
    for argument in function.args.args:
        name = argument.arg
        if name in functions and name not in seen and runs_snakemake(functions[name], functions, seen | {name}):
            return True
    for node in ast.walk(function):
        if isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
            if name in SNAKEMAKE_CALLS:
                return True
            if name in functions and name not in seen and runs_snakemake(functions[name], functions, seen | {name}):
                return True
    return False


def test_the_conftests_lists_name_existing_modules_and_tests():
    assert all((TESTS / module).is_file() for module in SLOW_MODULES), SLOW_MODULES
    for test in SLOW_TESTS:
        module, _, function = test.partition("::")
        assert function in module_functions(TESTS / module), f"{test} does not exist"


@pytest.mark.slow
def test_the_fast_lane_collects_no_test_that_runs_snakemake():
    """pytest collects the fast lane of the modules that hold a test running Snakemake (collecting the
    others, which import torch and the like, could add no offender); none of those tests is in it."""
    runners = {}
    for path in sorted(TESTS.glob("test_*.py")):
        functions = module_functions(path)
        runners[path] = [f"tests/{path.name}::{name}" for name, function in functions.items()
                         if name.startswith("test_") and runs_snakemake(function, functions)]
    modules = [str(path) for path, tests in runners.items() if tests]
    assert modules  # the workflow's tests: else SNAKEMAKE_CALLS no longer names how they run it
    collected = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "not slow", *modules],
                               capture_output=True, text=True, cwd=TESTS.parent, timeout=600,
                               env={**os.environ, "PYTHONPATH": str(TESTS.parent / "src")})
    assert collected.returncode == 0, collected.stdout[-3000:] + collected.stderr[-3000:]
    fast = {line.split("[")[0] for line in collected.stdout.splitlines() if "::" in line}
    assert fast, collected.stdout[-2000:]
    offenders = [test for tests in runners.values() for test in tests if test in fast]
    assert not offenders, f"mark these slow (tests/conftest.py): {offenders}"
