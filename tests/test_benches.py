"""Every bench/ script runs in its quick mode, so an API change that breaks a bench fails here.

A quick run uses tiny shapes and few repeats: its timings measure nothing, so no target is checked; what
a bench verifies itself (verdicts, equivalence, a valid run) is, through its exit status and the lines
it prints. bench/gpu_smoke.py and the step it runs, bench/fsdp_microbatch.py, have their own test
(tests/test_gpu_smoke.py). The scripts that train, build models or start several interpreters are
``slow`` (outside ``make test-fast``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BENCH = REPO / "bench"
OWN_TEST = {"gpu_smoke.py": "tests/test_gpu_smoke.py", "fsdp_microbatch.py": "tests/test_gpu_smoke.py"}
"""Bench scripts that a test of their own runs, apart from this file's quick runs (bench/gpu_smoke.py runs
fsdp_microbatch.py as one of its steps)."""

QUICK: dict[str, tuple[list[str], list[str]]] = {
    # script: (arguments after the script, lines (substrings) its output must contain)
    "aggregation.py": (["--quick"], ["aggregation_weights balanced-agg", "slowest weights"]),
    "analysis.py": (["--quick"], ["table1.build_table", "figure3 (make + png)", "evaluation rows"]),
    "ddp_equivalence.py": (["--quick"], ["token-agg  vs TRL dapo : max |loss diff|", "PASS"]),
    "demo.py": (["{campaign}"], ["train", "served by the job server", "weights"]),
    "generation.py": (["--quick"], ["backend=transformers", "tok/s"]),
    "scoring.py": (["--quick"], ["math verification:", "sandbox"]),
    "startup.py": (["--quick"], ["--help", "prepare-data", "whole runs, start to exit"]),
    "tinyworld.py": (["--quick", "--out", "{tmp}/tinyworld"], ["data:", "tiny-xs:", "total:"]),
    "train_step.py": (["--quick"], ["balanced-agg / token-agg per round", "median paired overhead"]),
    "walk_probe.py": (["--quick", "--out", "{tmp}/walk"], ["built 37 problems", "seed 0:", "steps"]),
}
SLOW = {"ddp_equivalence.py", "generation.py", "startup.py", "tinyworld.py", "train_step.py", "walk_probe.py"}


def campaign_with_benchmarks(root: Path) -> Path:
    """A campaign folder as ``make demo`` leaves it, for bench/demo.py: Snakemake's benchmark files
    (written by Snakemake's own writer) and a job server log (written by a real job server run)."""
    from snakemake.benchmark import BenchmarkRecord, write_benchmark_records

    campaign = root / "results" / "demo"
    for relative, seconds in (("cell/benchmarks/train.tsv", 12.5), ("cell/benchmarks/generate-000020.tsv", 3.0),
                              ("benchmarks/plan.tsv", 0.5)):
        path = campaign / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        record = BenchmarkRecord(running_time=seconds, cpu_time=seconds / 2)
        record.data_collected = True
        write_benchmark_records([record], str(path), extended_fmt=False)
    from balagg.jobserver.server import THREAD_ENV

    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), **dict.fromkeys(THREAD_ENV, "1")}  # as Snakemake sets them
    served = subprocess.run(
        [sys.executable, "-m", "balagg", "jobserver", "--preload", "", "--log", str(campaign / "logs" / "jobserver.log"),
         "--", sys.executable, "-m", "balagg", "weights", "--rewards", "1,0", "--lengths", "3,4"],
        capture_output=True, text=True, env=env, timeout=120)
    assert served.returncode == 0, served.stderr[-2000:]
    return campaign


def bench_params():
    return [pytest.param(name, marks=[pytest.mark.slow] if name in SLOW else []) for name in sorted(QUICK)]


def test_every_bench_script_has_a_quick_run_here_or_a_test_of_its_own():
    scripts = {path.name for path in BENCH.glob("*.py")}
    assert scripts - set(OWN_TEST) == set(QUICK)
    assert all((REPO / test).is_file() for name, test in OWN_TEST.items() if name in scripts)


@pytest.mark.parametrize("name", bench_params())
def test_bench_quick_run(name, tmp_path):
    arguments, expected = QUICK[name]
    campaign = campaign_with_benchmarks(tmp_path) if name == "demo.py" else None
    arguments = [a.format(tmp=tmp_path, campaign=campaign) for a in arguments]
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    result = subprocess.run([sys.executable, str(BENCH / name), *arguments], capture_output=True, text=True,
                            env=env, cwd=tmp_path, timeout=900)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    for line in expected:
        assert line in result.stdout, f"{name}: {line!r} not in its output:\n{result.stdout[-3000:]}"
