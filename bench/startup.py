"""Start-up cost of each ``python -m balagg`` subcommand: wall and CPU seconds from process start to
its first useful line of work, and which heavy packages are loaded by then.

    python bench/startup.py [--repeat 3] [--quick]

"First useful work" is the first time the command opens its main input (an audit hook on ``open``
and ``sqlite3.connect``; ``name#k``: its k-th opening): the model weights for generate and train (their
second opening: the first reads only the header, to refuse a truncated file before any import), the
generations for score, and so on; the command is stopped there. Each command runs on a small real fixture built
here (tiny-world data, an untrained tiny model), so the figures are what every workflow job of that
rule pays before it works. The median of ``--repeat`` runs is printed.

A second table times whole runs of the commands that end quickly on the fixture, start to exit, two
ways: ``python -m balagg`` (which ends through ``balagg.cli.exit_without_teardown``) and the same
``main()`` ended by a plain ``sys.exit``, whose interpreter teardown garbage-collects every imported
module; the difference is what each job saves at its end.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "transformers", "trl", "accelerate", "mlflow", "sklearn", "pandas", "matplotlib", "vllm")

PROBE = r"""
import atexit, os, resource, runpy, sys, time
marker, args = sys.argv[1], sys.argv[2:]
marker, _, nth = marker.partition("#")
seen = [0]
def report():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    heavy = sorted({m.split(".")[0] for m in sys.modules} & set(os.environ["BENCH_HEAVY"].split(",")))
    os.write(2, ("\nSTARTUP %.4f %.4f %s\n" % (time.time(), usage.ru_utime + usage.ru_stime, ",".join(heavy))).encode())
    os._exit(0)
def hook(event, hook_args):
    if event == "sqlite3.connect" and marker == "sqlite":
        report()
    if event == "open" and isinstance(hook_args[0], str) and marker != "sqlite" and hook_args[0].endswith(marker):
        seen[0] += 1
        if seen[0] >= int(nth or 1):
            report()
sys.addaudithook(hook)
atexit.register(report)  # no marker met (or none given): the whole run, --help's SystemExit included
sys.argv = ["balagg", *args]
runpy.run_module("balagg", run_name="__main__")
"""


def balagg(root: Path, *args: str) -> None:
    subprocess.run([sys.executable, "-m", "balagg", *args], cwd=root, check=True, capture_output=True,
                   env={**os.environ, "PYTHONPATH": str(REPO / "src")})


def fixture(root: Path, with_model: bool = True) -> None:
    """Tiny-world data, one prepared training set, a campaign's Table 1 and, ``with_model``, one prepared
    benchmark, an untrained tiny model, its generations and their scores."""
    balagg(root, "tinyworld", "data", "--out", "raw", "--train-problems", "16", "--bench-problems", "2")
    balagg(root, "prepare-data", "--dataset", "dapo-math-17k", "--source", "raw/dapo-math-17k", "--out", "train.jsonl")
    (root / "campaign/analysis").mkdir(parents=True)
    (root / "campaign/analysis/table1.md").write_text("| model | acc |\n|---|---|\n")
    if not with_model:
        return
    balagg(root, "prepare-data", "--benchmark", "math500", "--source", "raw/math500", "--out", "bench/math500.jsonl")
    subprocess.run([sys.executable, "-c", "from balagg.tinyworld.model import build_model, build_tokenizer, save_checkpoint;"
                    "t = build_tokenizer(); save_checkpoint(build_model('tiny-s', t, seed=0), t, 'model')"],
                   cwd=root, check=True, capture_output=True, env={**os.environ, "PYTHONPATH": str(REPO / "src")})
    balagg(root, "generate", "--checkpoint", "model", "--out", "eval/step-000000", "--benchmarks-dir", "bench",
           "--benchmarks", "math500", "--n", "2", "--max-tokens", "8", "--chat-template", "false")
    balagg(root, "score", "--generations", "eval/step-000000/generations.jsonl", "--out", "eval/step-000000",
           "--benchmarks-dir", "bench", "--workers", "1")
    cell = {"model": "model", "train_files": ["train.jsonl"], "aggregator": "balanced-agg", "seed": 0,
            "chat_template": False, "prompt_template": "{problem}", "num_generations": 2, "prompts_per_step": 2,
            "mini_batches": 1, "micro_batch_size": 4, "max_prompt_length": 64, "max_completion_length": 8,
            "total_steps": 1, "save_every": 1, "overlong_buffer_enabled": False, "mlflow_tracking_uri": f"sqlite:///{root / 'mlflow.db'}"}
    (root / "cell.json").write_text(json.dumps(cell))


# (label, first-work marker: a path suffix or "sqlite", arguments)
COMMANDS = [
    ("--help", "-", ["--help"]),
    ("weights", "-", ["weights", "--rewards", "1,0,0", "--lengths", "10,20,30"]),
    ("tinyworld data", "manifest.json", ["tinyworld", "data", "--out", "raw2", "--train-problems", "8", "--bench-problems", "1"]),
    ("tinyworld model", "raw/manifest.json", ["tinyworld", "model", "--size", "tiny-s", "--raw", "raw", "--out", "m2"]),
    ("prepare-data", "dapo-math-17k.parquet", ["prepare-data", "--dataset", "dapo-math-17k", "--source", "raw/dapo-math-17k", "--out", "t2.jsonl"]),
    ("train", "model.safetensors#2", ["train", "--cell", "cell.json", "--workdir", "w", "--out", "w/manifest.json"]),
    ("generate", "model.safetensors#2", ["generate", "--checkpoint", "model", "--out", "g", "--benchmarks-dir", "bench",
                                       "--benchmarks", "math500", "--n", "2", "--max-tokens", "8", "--chat-template", "false"]),
    ("score", "generations.jsonl", ["score", "--generations", "eval/step-000000/generations.jsonl", "--out", "s/step-000000",
                                    "--benchmarks-dir", "bench", "--workers", "1"]),
    ("curve", "summary.json", ["curve", "--out", "curve.csv", "eval/step-000000/summary.json"]),
    ("track setup", "sqlite", ["track", "setup", "--tracking-uri", "sqlite:///{root}/t.db", "--experiment", "e", "--out", "e.json"]),
    ("results", "table1.md", ["results", "--campaign-dir", "campaign"]),
]


def measure(root: Path, marker: str, args: list[str]) -> tuple[float, float, str]:
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "BENCH_HEAVY": ",".join(HEAVY)}
    start = time.time()
    result = subprocess.run([sys.executable, "-c", PROBE, marker, *[a.format(root=root) for a in args]],
                            cwd=root, capture_output=True, text=True, env=env)
    line = next((l for l in result.stderr.splitlines() if l.startswith("STARTUP ")), None)
    failed = any(l.startswith("error:") for l in result.stderr.splitlines())  # stopped before its first work
    if line is None or failed:
        raise RuntimeError(f"{args[0]}: no start-up line (exit {result.returncode}): {result.stderr[-800:]}")
    _, stamp, cpu, *heavy = line.split(" ")
    return float(stamp) - start, float(cpu), heavy[0] if heavy else ""


QUICK = ("--help", "weights", "tinyworld data", "prepare-data", "results")
"""The commands of a quick run: those whose fixture needs no model."""

PLAIN_EXIT = "import sys; from balagg.cli import main; sys.exit(main(sys.argv[1:]))"
WHOLE_RUNS = ("train", "generate", "score", "track setup")
QUICK_WHOLE_RUNS = ("prepare-data",)


def whole_run(root: Path, args: list[str], plain_exit: bool) -> tuple[float, float]:
    """Wall and CPU seconds (children's rusage) of one complete run, exit included."""
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    head = [sys.executable, "-c", PLAIN_EXIT] if plain_exit else [sys.executable, "-m", "balagg"]
    shutil.rmtree(root / "w", ignore_errors=True)  # train's workdir: a finished one would only be re-read
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.time()
    subprocess.run([*head, *[a.format(root=root) for a in args]], cwd=root, check=True, capture_output=True, env=env)
    wall = time.time() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="one run of the commands that need no model (seconds): checks that the bench runs; its figures measure little")
    args = parser.parse_args()
    commands = [c for c in COMMANDS if c[0] in QUICK] if args.quick else COMMANDS
    whole_runs = QUICK_WHOLE_RUNS if args.quick else WHOLE_RUNS
    if args.quick:
        args.repeat = 1
    with tempfile.TemporaryDirectory(prefix="balagg-startup-") as tmp:
        root = Path(tmp)
        fixture(root, with_model=not args.quick)
        print(f"load average {os.getloadavg()[0]:.1f}; median of {args.repeat} runs")
        print(f"{'command':<16} {'wall s':>7} {'cpu s':>7}  heavy packages loaded before the first work")
        for label, marker, command in commands:
            runs = [measure(root, marker, command) for _ in range(args.repeat)]
            wall = statistics.median(r[0] for r in runs)
            cpu = statistics.median(r[1] for r in runs)
            print(f"{label:<16} {wall:>7.2f} {cpu:>7.2f}  {runs[-1][2] or '-'}")
        print(f"\nwhole runs, start to exit: {'balagg exit':>23} {'plain sys.exit':>17}")
        print(f"{'command':<16} {'wall s':>7} {'cpu s':>7} {'wall s':>9} {'cpu s':>7} {'cpu saved':>10}")
        for label, _, command in commands:
            if label not in whole_runs:
                continue
            fast = [whole_run(root, command, plain_exit=False) for _ in range(args.repeat)]
            plain = [whole_run(root, command, plain_exit=True) for _ in range(args.repeat)]
            f_wall, f_cpu = (statistics.median(r[i] for r in fast) for i in (0, 1))
            p_wall, p_cpu = (statistics.median(r[i] for r in plain) for i in (0, 1))
            print(f"{label:<16} {f_wall:>7.2f} {f_cpu:>7.2f} {p_wall:>9.2f} {p_cpu:>7.2f} {p_cpu - f_cpu:>10.2f}")


if __name__ == "__main__":
    main()
