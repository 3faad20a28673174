"""The Snakemake workflow, checked through dry runs: the grid, config validation, single-cell reruns.

The full smoke run (every rule executed) lives in test_pipeline.py.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from checkout import REPO, copy_workflow


def snakemake(*args: str, cwd: Path, check: bool = True, job_server_log: Path | None = None) -> subprocess.CompletedProcess:
    """Run the venv's snakemake with the venv first on PATH, as `make demo` does (rules call `python`).

    ``job_server_log``: run it under `python -m balagg jobserver --log FILE`, as `make demo` does."""
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    command = [str(bin_dir / "snakemake"), *args]
    if job_server_log is not None:
        command = [sys.executable, "-m", "balagg", "jobserver", "--log", str(job_server_log), "--", *command]
    result = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=600, env=env)
    if check and result.returncode != 0:
        raise AssertionError(f"snakemake {' '.join(args)} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return result


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """A copy of the workflow in a fresh folder, so runs never touch the repository's results/."""
    return copy_workflow(tmp_path)


def job_counts(output: str) -> dict[str, int]:
    """The 'Job stats' table of a dry run, or the 'N jobs to run: rule n, ...' line of a run's console (the
    balagg logger), as {rule: count}."""
    if "Job stats:" not in output:
        (line,) = re.findall(r"^\d+ jobs to run: (.*)$", output, flags=re.MULTILINE)
        return {rule: int(n) for rule, n in (item.rsplit(" ", 1) for item in line.split(", "))}
    table = output.split("Job stats:", 1)[1]
    counts = {}
    for line in table.splitlines():
        match = re.match(r"^([a-z_0-9]+)\s+(\d+)$", line.strip())
        if match:
            counts[match.group(1)] = int(match.group(2))
        if line.strip().startswith("total"):
            break
    return counts


def mark_smoke_grid_done(workdir: Path, write_cell_configs: bool = False) -> None:
    """Mark the whole smoke grid as done without running it: create every output, then --touch.
    ``write_cell_configs``: really run the cheap cell_config jobs first, so their params are recorded
    (files made by --touch carry no params metadata, so a params change would go unseen)."""
    summary = snakemake("--configfile", "configs/smoke.yaml", "--summary", cwd=workdir).stdout
    for line in summary.splitlines()[1:]:
        path = workdir / line.split("\t")[0]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()
    if write_cell_configs:
        snakemake("--cores", "1", "--configfile", "configs/smoke.yaml", "--forcerun", "cell_config", "--until",
                  "cell_config", cwd=workdir)
    snakemake("--configfile", "configs/smoke.yaml", "--touch", "--cores", "1", cwd=workdir)


def test_lint_is_clean(workdir):
    result = snakemake("--lint", cwd=workdir)
    assert "Congratulations" in result.stdout + result.stderr


def test_paper_grid_resolves_every_job_up_front(workdir):
    """The DAG holds every job of the grid (balagg.grid) before anything runs: a train job per cell asking
    for its model's GPUs, a generate and score job per trained checkpoint, step 0 once per model."""
    from balagg.campaign import load
    from balagg.grid import Grid

    grid = Grid(load([str(workdir / "configs/paper.yaml")]))
    result = snakemake("-n", "-p", "--configfile", "configs/paper.yaml", cwd=workdir)
    counts = job_counts(result.stdout)
    assert counts["train"] == counts["cell_config"] == counts["collect_curve"] == len(grid.cells)
    checkpoints = sum(grid.evaluated_checkpoints(cell.model) for cell in grid.cells)
    assert counts["generate"] == counts["score"] == checkpoints + len(grid.models)
    assert counts["prepare_data"] == len(grid.data_files())
    assert "tinyworld_data" not in counts and "tinyworld_model" not in counts
    train_jobs = [job for job in result.stdout.split("\n\n") if "rule train:" in job]
    gpus = sorted(int(re.search(r"\bgpu=(\d+)", job).group(1)) for job in train_jobs)
    assert gpus == sorted(grid.resource(cell.model, "train_resources", "gpus") for cell in grid.cells)
    assert all("python -m balagg train --cell " in job for job in train_jobs)


def test_default_grid_is_the_papers_shape_on_the_tiny_world(workdir):
    counts = job_counts(snakemake("-n", cwd=workdir).stdout)
    assert counts["train"] == 12
    assert counts["tinyworld_model"] == 2 and counts["tinyworld_data"] == 1
    # one generation and one scoring job per checkpoint: step 0 once per model, the later steps per cell
    train = yaml.safe_load((REPO / "configs/default.yaml").read_text())["train"]
    steps = range(train["eval_every"], train["total_steps"] + 1, train["eval_every"])
    assert len(steps) >= 2 and steps[-1] == train["total_steps"]
    assert counts["generate"] == counts["score"] == 2 + 12 * len(steps)
    printed = snakemake("-n", "-p", "results/default/tiny-xs/arith-long/seq-agg/seed0/eval/curve.csv", cwd=workdir).stdout
    generate = [job for job in printed.split("\n\n") if "rule generate:" in job]
    cell = "results/default/tiny-xs/arith-long/seq-agg/seed0"
    for step in steps:
        (job,) = [job for job in generate if f"--out {cell}/eval/step-{step:06d}" in job]
        assert f"--checkpoint {cell}/train/checkpoints/step-{step:06d} " in job
    (initial,) = [job for job in generate if "--out results/default/tiny-xs/initial/eval/step-000000" in job]
    assert len(generate) == len(steps) + 1


def test_second_configfile_overrides_keys(workdir):
    (workdir / "longer.yaml").write_text("train:\n  total_steps: 6\n")
    counts = job_counts(snakemake("-n", "--configfile", "configs/smoke.yaml", "longer.yaml", cwd=workdir).stdout)
    assert counts["generate"] == 3 * 3 + 1  # steps 2, 4, 6 per cell, step 0 once
    counts = job_counts(snakemake("-n", "--configfile", "configs/smoke.yaml", "--config", "seeds=[0,1]",
                                  cwd=workdir).stdout)
    assert counts["train"] == 6


@pytest.mark.parametrize(
    ("override", "named"),
    [
        (["--config", "aggregators=[token-agg,bogus-agg]"], "bogus-agg"),
        (["--config", "campaign=bad name!"], "campaign"),
        (["--config", "surprise=1"], "surprise"),
    ],
)
def test_bad_config_stops_before_any_job_naming_the_problem(workdir, override, named):
    result = snakemake("--cores", "1", "--configfile", "configs/smoke.yaml", *override, cwd=workdir, check=False)
    assert result.returncode != 0
    assert named in result.stderr
    assert not (workdir / "results").exists()


def test_forcing_one_cell_schedules_only_that_cell_and_the_analysis(workdir):
    mark_smoke_grid_done(workdir)
    assert "Nothing to be done" in snakemake("-n", "--configfile", "configs/smoke.yaml", cwd=workdir).stdout

    cell = "results/smoke/tiny-s/arith-long/balanced-agg/seed0"
    result = snakemake("-n", "--configfile", "configs/smoke.yaml", "-R", f"{cell}/manifest.json", cwd=workdir)
    jobs = re.findall(r"^(?:local)?rule (\w+):\n((?:    .*\n)*)", result.stdout, flags=re.MULTILINE)
    per_cell = [(rule, body) for rule, body in jobs if "aggregator=" in body or "run=" in body]
    assert {rule for rule, _ in per_cell} >= {"train", "generate", "score", "collect_curve"}
    assert all("aggregator=balanced-agg" in body or "run=arith-long/balanced-agg/seed0" in body
               for _, body in per_cell), per_cell
    counts = job_counts(result.stdout)
    # steps 2 and 4 of that cell; the initial model's step 0 is unchanged
    assert counts["train"] == 1 and counts["generate"] == 2 and counts["score"] == 2
    assert "prepare_data" not in counts and "tinyworld_model" not in counts


def test_a_bad_training_combination_stops_before_any_job(workdir):
    # valid key by key, but 2 prompts x 4 responses do not split into 3 optimiser steps
    (workdir / "bad.yaml").write_text("train:\n  mini_batches: 3\n")
    result = snakemake("--cores", "1", "--configfile", "configs/smoke.yaml", "bad.yaml", cwd=workdir, check=False)
    assert result.returncode != 0
    assert "mini_batches=3" in result.stderr
    assert not (workdir / "results").exists()


def test_the_cell_config_rule_writes_each_cells_resolved_config(workdir, monkeypatch):
    """Only the cheap cell_config jobs run: each cell.json is balagg.grid's config of the cell its path
    names, for every cell of the grid."""
    from balagg.campaign import load
    from balagg.grid import Grid

    snakemake("--cores", "1", "--until", "cell_config", cwd=workdir)
    monkeypatch.chdir(workdir)  # the tracking URI is the campaign's SQLite file, absolute
    grid = Grid(load(["configs/default.yaml"]))
    root = workdir / "results" / grid.name
    written = {path.parent.relative_to(root).as_posix(): json.loads(path.read_text())
               for path in root.glob("*/*/*/seed*/cell.json")}
    assert written == {cell.relpath: grid.cell_config(cell) for cell in grid.cells}


def test_an_interrupted_retrain_leaves_the_cell_incomplete_not_an_old_curve_standing(workdir):
    """The README's retrain recipe killed midway: the train job had removed the cell's eval/ and the
    analysis (its --invalidate paths) and Snakemake had removed the manifest; the plain command must
    then finish the cell and redo the analysis instead of "Nothing to be done"."""
    mark_smoke_grid_done(workdir)
    cell = "results/smoke/tiny-s/arith-long/balanced-agg/seed0"
    forced = snakemake("-n", "-p", "--configfile", "configs/smoke.yaml", "-R", f"{cell}/manifest.json", cwd=workdir)
    train = [line for line in forced.stdout.splitlines() if "balagg train --cell " in line]
    assert len(train) == 1 and f"--invalidate {cell}/eval --invalidate results/smoke/analysis" in train[0]

    shutil.rmtree(workdir / cell / "eval")  # what the killed train job had done before training
    shutil.rmtree(workdir / "results/smoke/analysis")
    (workdir / cell / "manifest.json").unlink()  # Snakemake removes a failed job's output
    counts = job_counts(snakemake("-n", "--configfile", "configs/smoke.yaml", cwd=workdir).stdout)
    assert counts["train"] == 1 and counts["collect_curve"] == 1 and counts["table1"] == 1
    assert counts["generate"] == 2 and counts["mlflow_log_eval"] == 1


def test_the_report_is_built_after_every_other_job(workdir):
    """`snakemake --report` (nested in the report rule) refuses a DAG with a file still being written, so
    every job of the campaign but `all` must be upstream of the report job, MLflow logging included."""
    dot = snakemake("-F", "--dag", "--configfile", "configs/smoke.yaml", cwd=workdir).stdout
    rules = {node: label.split("\\n")[0] for node, label in re.findall(r'^\s*(\d+)\[label = "([^"]*)"', dot, re.M)}
    parents: dict[str, set[str]] = {}
    for source, target in re.findall(r"^\s*(\d+) -> (\d+)", dot, re.M):
        parents.setdefault(target, set()).add(source)
    (report,) = [node for node, rule in rules.items() if rule == "report"]
    upstream, frontier = set(), [report]
    while frontier:
        for parent in parents.get(frontier.pop(), ()):
            if parent not in upstream:
                upstream.add(parent)
                frontier.append(parent)
    left_out = sorted(rules[node] for node in rules if node not in upstream | {report} and rules[node] != "all")
    assert "mlflow_log_analysis" in rules.values()
    assert not left_out, f"jobs that may still run while the report is built: {left_out}"


def test_changing_one_aggregators_setting_reruns_only_its_cells(workdir):
    """`train: {scope: group}` changes what token-agg trains (its default scope is the batch) and nothing
    else: after a finished grid, only the token-agg cell and the analysis are scheduled; a key set to its
    default value schedules nothing."""
    mark_smoke_grid_done(workdir, write_cell_configs=True)
    assert "Nothing to be done" in snakemake("-n", "--configfile", "configs/smoke.yaml", cwd=workdir).stdout

    (workdir / "default-valued.yaml").write_text("train:\n  clip_ratio_low: 0.2\n  clip_ratio_high: 0.28\n")
    result = snakemake("-n", "--configfile", "configs/smoke.yaml", "default-valued.yaml", cwd=workdir)
    assert "Nothing to be done" in result.stdout, result.stdout[-2000:]

    (workdir / "scope.yaml").write_text("train:\n  scope: group\n")
    result = snakemake("-n", "--configfile", "configs/smoke.yaml", "scope.yaml", cwd=workdir)
    counts = job_counts(result.stdout)
    assert counts["cell_config"] == counts["train"] == counts["collect_curve"] == 1
    assert counts["generate"] == counts["score"] == 2  # that cell's steps 2 and 4; step 0 is the model's
    jobs = re.findall(r"^(?:local)?rule (\w+):\n((?:    .*\n)*)", result.stdout, flags=re.MULTILINE)
    per_cell = [body for rule, body in jobs if "aggregator=" in body or "run=" in body]
    assert per_cell and all("aggregator=token-agg" in body or "run=arith-long/token-agg/seed0" in body
                            for body in per_cell), per_cell
