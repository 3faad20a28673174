"""No command imports what it does not use: each light subcommand runs for real in a fresh interpreter
and the heavy packages it must not load are checked in its sys.modules at exit (bench/startup.py
prints what the imports cost)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
ML = ("torch", "transformers", "trl", "accelerate", "vllm")
HEAVY = (*ML, "mlflow", "sklearn", "pandas", "matplotlib", "snakemake")

# Runs `python -m balagg ARGS` and, at exit, writes the names of the loaded top-level packages.
PROBE = """
import atexit, json, runpy, sys
out, args = sys.argv[1], sys.argv[2:]
atexit.register(lambda: open(out, "w").write(json.dumps(sorted({m.split(".")[0] for m in sys.modules}))))
sys.argv = ["balagg", *args]
runpy.run_module("balagg", run_name="__main__")
"""


def loaded(tmp_path: Path, *args: str) -> set[str]:
    """Top-level packages a real run of `python -m balagg ARGS` imported (it must succeed)."""
    out = tmp_path / "modules.json"
    result = subprocess.run([sys.executable, "-c", PROBE, str(out), *args], cwd=tmp_path, capture_output=True,
                            text=True, env={"PYTHONPATH": str(REPO / "src"), "PATH": "/usr/bin:/bin"}, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    return set(json.loads(out.read_text()))


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A tiny world's raw data, one prepared benchmark and hand-written generations for it."""
    root = tmp_path_factory.mktemp("world")
    run = lambda *args: subprocess.run([sys.executable, "-m", "balagg", *args], cwd=root, check=True,  # noqa: E731
                                       capture_output=True, env={"PYTHONPATH": str(REPO / "src"), "PATH": "/usr/bin:/bin"})
    run("tinyworld", "data", "--out", "raw", "--train-problems", "8", "--bench-problems", "2")
    run("prepare-data", "--benchmark", "math500", "--source", "raw/math500", "--out", "bench/math500.jsonl")
    records = [json.loads(line) for line in (root / "bench/math500.jsonl").read_text().splitlines()]
    step = root / "eval/step-000004"
    step.mkdir(parents=True)
    lines = [{"benchmark": "math500", "problem_id": r["id"], "sample": s, "seed": s, "finish_reason": "stop",
              "num_tokens": 5, "text": f"\\boxed{{{r['answer'] if s == 0 else 'x'}}}"} for r in records for s in range(2)]
    (step / "generations.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    return root


def test_help_imports_no_ml_stack_or_tracking(tmp_path):
    modules = loaded(tmp_path, "--version")
    assert not modules & set(HEAVY), modules & set(HEAVY)


def test_score_and_curve_import_no_ml_stack(world, tmp_path):
    step = world / "eval/step-000004"
    modules = loaded(tmp_path, "score", "--generations", str(step / "generations.jsonl"), "--out", str(step),
                     "--benchmarks-dir", str(world / "bench"), "--workers", "1")
    assert json.loads((step / "summary.json").read_text())["mean"]["acc@2"] == 0.5  # it really scored
    assert not modules & set(HEAVY), f"score must not import torch or transformers: {modules & set(HEAVY)}"
    modules = loaded(tmp_path, "curve", "--out", str(tmp_path / "curve.csv"), str(step / "summary.json"))
    assert (tmp_path / "curve.csv").is_file() and not modules & set(HEAVY)


def test_data_commands_import_no_ml_stack(world, tmp_path):
    # the real datasets are parquet: pyarrow's reader and writer load pandas themselves
    forbidden = set(HEAVY) - {"pandas"}
    modules = loaded(tmp_path, "tinyworld", "data", "--out", str(tmp_path / "raw"), "--train-problems", "8",
                     "--bench-problems", "2")
    assert not modules & forbidden, modules & forbidden
    modules = loaded(tmp_path, "prepare-data", "--dataset", "dapo-math-17k", "--source",
                     str(world / "raw/dapo-math-17k"), "--out", str(tmp_path / "train.jsonl"))
    assert (tmp_path / "train.jsonl").is_file() and not modules & forbidden, modules & forbidden


def test_tracking_setup_imports_mlflow_but_no_ml_stack(tmp_path):
    out = tmp_path / "experiment.json"
    modules = loaded(tmp_path, "track", "setup", "--tracking-uri", f"sqlite:///{tmp_path / 'mlflow.db'}",
                     "--experiment", "c", "--out", str(out))
    assert json.loads(out.read_text())["status"] == "ok" and "mlflow" in modules
    assert not modules & set(ML)


def test_results_reads_files_only(tmp_path):
    campaign = tmp_path / "results/c"
    (campaign / "analysis").mkdir(parents=True)
    (campaign / "analysis/table1.md").write_text("| model | acc |\n|---|---|\n| tiny-s | 0.5 |\n")
    modules = loaded(tmp_path, "results", "--campaign-dir", str(campaign))
    assert not modules & set(HEAVY)


def test_the_rule_registry_imports_without_torch_and_the_weights_on_first_use():
    """The workflow reads the registry while it builds the DAG: `balagg.aggregation.rules` (and the package)
    load no torch; README's `from balagg.aggregation import aggregation_weights, aggregate` loads it then."""
    code = (
        "import sys, balagg.aggregation, balagg.aggregation.rules\n"
        "assert 'torch' not in sys.modules, 'the registry imported torch'\n"
        "assert not hasattr(balagg.aggregation, 'RULES'), 'the package re-exports registry names'\n"
        "from balagg.aggregation import aggregation_weights, aggregate\n"
        "assert 'torch' in sys.modules\n"
        "assert aggregation_weights('seq-agg', [2, 4], [1.0, -1.0], [0, 0]).tolist() == [0.25, 0.125]\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                            env={"PYTHONPATH": str(REPO / "src"), "PATH": "/usr/bin:/bin"})
    assert result.returncode == 0, result.stderr[-2000:]
