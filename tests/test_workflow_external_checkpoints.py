"""Evaluation-only campaigns through Snakemake: external checkpoints (a hub id pinned to one of two cached
revisions, a local folder, a run folder of several steps) evaluated with no training job, their curves,
Table 1 rows and MLflow runs; and the bad entries refused at DAG build in one line each.

The hub cache is filled with tiny stand-ins under the paper's hub id (balagg.tinyworld.hubcache) and every
job runs with HF_HUB_OFFLINE=1."""

from __future__ import annotations

import csv
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from checkout import copy_workflow
from test_external_checkpoints import (BAD_CHECKPOINTS, MODEL, bad_checkpoint, fake_verl_checkpoint, save_tiny_model,
                              two_revisions)
from test_workflow import job_counts

from balagg.tinyworld.hubcache import repo_folder


def run_snakemake(*args: str, cwd: Path, hf_home: Path, timeout: int = 900) -> subprocess.CompletedProcess:
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}", "HF_HOME": str(hf_home),
           "HF_HUB_OFFLINE": "1"}
    env.pop("HF_HUB_CACHE", None)
    return subprocess.run([str(bin_dir / "snakemake"), *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=env)


def evaluation_config(checkpoints: dict) -> dict:
    """A campaign of external checkpoints only, at tiny sizes, on two tiny-world benchmarks."""
    return {
        "campaign": "evalonly",
        "benchmarks": {"math500": "tinyworld", "aime24": "tinyworld"},
        "tinyworld": {"train_problems": 8, "bench_problems": 2, "sft_steps": 0},
        "eval": {"n": 8, "max_tokens": 8, "batch_size": 64},
        "checkpoints": checkpoints,
    }


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A workflow copy, a hub cache with MODEL at main and v1, a local folder and a run folder of two steps."""
    root = tmp_path_factory.mktemp("evalonly")
    (root / "work").mkdir()
    work = copy_workflow(root / "work")
    hf_home = root / "hf"
    main_commit, v1 = two_revisions(hf_home)
    local = save_tiny_model(root / "models" / "local", seed=3)
    for step, seed in ((1, 4), (2, 5)):
        save_tiny_model(root / "models" / "run" / f"checkpoint-{step}", seed=seed)
    return {"work": work, "hf_home": hf_home, "main": main_commit, "v1": v1, "local": local,
            "run": root / "models" / "run"}


def write_config(work: Path, checkpoints: dict, name: str = "evalonly.yaml") -> str:
    (work / name).write_text(yaml.safe_dump(evaluation_config(checkpoints)))
    return name


SETTINGS = {"math_template": "{problem}"}


@pytest.fixture(scope="module")
def campaign(world):
    """The evaluation-only campaign, run to the end; returns its results folder and the dry run's job counts."""
    work = world["work"]
    name = write_config(work, {
        "base": {"path": MODEL, "revision": "v1", "chat_template": True, "enable_thinking": False, **SETTINGS},
        "mine": {"path": str(world["local"]), **SETTINGS},
        "myrun": {"path": str(world["run"]), **SETTINGS},
    })
    dry = run_snakemake("-n", "--configfile", name, cwd=work, hf_home=world["hf_home"])
    assert dry.returncode == 0, (dry.stdout + dry.stderr)[-3000:]
    done = run_snakemake("--cores", "2", "--configfile", name, cwd=work, hf_home=world["hf_home"])
    assert done.returncode == 0, (done.stdout + done.stderr)[-6000:]
    return work / "results" / "evalonly", job_counts(dry.stdout)


def test_an_evaluation_only_campaign_trains_nothing(campaign):
    _, counts = campaign
    assert not {"train", "cell_config", "tinyworld_model"} & set(counts), counts
    assert counts["generate"] == counts["score"] == 4  # base, mine, and the run's two steps
    assert counts["collect_curve"] == counts["mlflow_log_eval"] == counts["external_checkpoint"] == 3
    assert counts["fetch"] == 1 and counts["table1"] == 1 and "figure1" not in counts


def test_the_hub_checkpoint_is_evaluated_at_its_pinned_revision(campaign, world):
    results, _ = campaign
    fetched = {r["repo_id"]: r for r in json.loads((results / "fetch.json").read_text())["repos"]}
    assert (fetched[MODEL]["revision"], fetched[MODEL]["commit"]) == ("v1", world["v1"])
    generation = json.loads((results / "base/external/eval/step-000000/generation.json").read_text())
    assert generation["source"] == f"{MODEL}@v1"
    assert Path(generation["checkpoint"]) == repo_folder(world["hf_home"], MODEL, "model") / "snapshots" / world["v1"]
    record = json.loads((results / "base/external/checkpoint.json").read_text())
    assert (record["revision"], record["commit"]) == ("v1", world["v1"])


def test_each_checkpoint_has_a_curve_and_the_run_one_point_per_step(campaign):
    results, _ = campaign
    steps = {}
    for name in ("base", "mine", "myrun"):
        with (results / name / "external/eval/curve.csv").open() as handle:
            steps[name] = sorted({int(row["step"]) for row in csv.DictReader(handle)})
    assert steps == {"base": [0], "mine": [0], "myrun": [1, 2]}


def test_table1_has_a_row_per_checkpoint_named_with_its_revision(campaign, world):
    results, _ = campaign
    with (results / "analysis/table1.csv").open() as handle:
        rows = {row["model"]: row for row in csv.DictReader(handle)}
    assert set(rows) == {"base", "mine", "myrun"}
    assert {row["dataset"] for row in rows.values()} == {"(checkpoint)"}
    assert rows["base"]["aggregator"] == "(evaluated only)"
    assert rows["base"]["origin"] == f"{MODEL}@v1 (commit {world['v1'][:7]})"
    assert rows["base"]["commit"] == world["v1"] and rows["mine"]["source"] == str(world["local"])
    assert rows["myrun"]["last_step"] == "2" and rows["myrun"]["peak_acc@8_step"] in ("1", "2")
    assert all(math.isfinite(float(row["last_acc@8"])) for row in rows.values())
    assert f"| base | {MODEL}@v1 (commit {world['v1'][:7]}) |" in (results / "analysis/table1.md").read_text()


def test_each_checkpoint_has_its_own_mlflow_run(campaign):
    import mlflow

    results, _ = campaign
    runs = {}
    for name in ("base", "mine", "myrun"):
        status = json.loads((results / name / "external/eval/mlflow.json").read_text())
        assert status["status"] == "ok", status
        runs[name] = status["run_id"]
    client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{(results / 'mlflow.db').resolve()}")
    base = client.get_run(runs["base"])
    assert base.data.tags["kind"] == "external-checkpoint" and base.data.tags["revision"] == "v1"
    assert "eval/mean/acc_at_8" in base.data.metrics
    assert [p.step for p in client.get_metric_history(runs["myrun"], "eval/mean/acc_at_8")] == [1, 2]
    assert (results / "report.html").stat().st_size > 0


WORKFLOW_REFUSALS = {  # what only the workflow knows: whether verl imports, the evaluation's lengths
    "verl-without-verl": "python -m verl.model_merger merge --backend fsdp --local_dir ",
    "short-context": "model checkpoints.c: evaluation needs prompt 2048 (train.max_prompt_length) + completion 8 "
                     "(eval.max_tokens) = 2056 tokens, more than",
}


@pytest.mark.parametrize("case", ["missing-revision", "no-weights", "verl-without-huggingface", *WORKFLOW_REFUSALS])
def test_a_bad_checkpoint_stops_the_dag_in_one_line(world, tmp_path, case):
    name = write_config(world["work"], {"c": bad_checkpoint(case, tmp_path)}, name=f"bad-{case}.yaml")
    result = run_snakemake("-n", "--configfile", name, cwd=world["work"], hf_home=world["hf_home"])
    assert result.returncode != 0
    lines = [line for line in (result.stdout + result.stderr).splitlines() if "checkpoints.c" in line]
    said = [f"config {world['work'] / name}: ", *([WORKFLOW_REFUSALS[case]] if case in WORKFLOW_REFUSALS else
                                   ["checkpoints.c: ", BAD_CHECKPOINTS[case]])]
    assert len(lines) == 1 and all(part in lines[0] for part in said), result.stdout + result.stderr


def test_a_campaign_needs_a_grid_or_checkpoints(world):
    config = evaluation_config({})
    del config["checkpoints"]
    (world["work"] / "empty.yaml").write_text(yaml.safe_dump(config))
    result = run_snakemake("-n", "--configfile", "empty.yaml", cwd=world["work"], hf_home=world["hf_home"])
    output = result.stdout + result.stderr
    said = f"config {world['work'] / 'empty.yaml'}: nothing to run: give aggregators"
    assert result.returncode != 0 and said in output, output


def test_the_example_runs_through_the_slurm_profile_without_training(world):
    """configs/evaluate.yaml with --profile slurm: fetch, data, one GPU generate job per checkpoint with the
    paper model's resources, reading its pinned revision; no training. Online (HF_HUB_OFFLINE unset), as a
    submit host that fetches: the dry run downloads nothing."""
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
           "HF_HOME": str(world["hf_home"]), "HF_HUB_OFFLINE": "0"}
    result = subprocess.run([str(bin_dir / "snakemake"), "-n", "-p", "--profile", "slurm", "--configfile",
                             "configs/evaluate.yaml"], cwd=world["work"], capture_output=True, text=True, env=env,
                            timeout=600)
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    counts = job_counts(result.stdout)
    assert counts["generate"] == counts["score"] == 2 and counts["fetch"] == 1 and "train" not in counts
    example = yaml.safe_load((world["work"] / "configs/evaluate.yaml").read_text())["checkpoints"]
    for name, spec in example.items():
        assert f"--checkpoint {spec['path']}@{spec['revision']} " in result.stdout
        gpus = spec["generate_resources"]["gpus"]
        assert f"model={name}, run=external, step=000000" in result.stdout and f"gpu={gpus}" in result.stdout


FAKE_MERGER = '''"""Test double of verl's model merger CLI (python -m verl.model_merger merge --backend fsdp --local_dir
ACTOR --target_dir DIR): copies ACTOR/huggingface/ to DIR. The tests' huggingface/ folders hold weights."""
import argparse, shutil, sys

parser = argparse.ArgumentParser()
parser.add_argument("operation", choices=["merge"])
parser.add_argument("--backend", choices=["fsdp"], required=True)
parser.add_argument("--local_dir", required=True)
parser.add_argument("--target_dir", required=True)
args = parser.parse_args()
shutil.copytree(f"{args.local_dir}/huggingface", args.target_dir, dirs_exist_ok=True)
print("merged", args.local_dir, "->", args.target_dir, file=sys.stderr)
'''


def test_a_verl_run_is_merged_by_the_merge_rule_where_verl_imports(world, tmp_path):
    """A folder of verl global_step_N checkpoints, with a `verl` importable (a test double of its merger on
    PYTHONPATH): one merge_verl job per step, each merged folder evaluated at its step."""
    fake = tmp_path / "fake-verl"
    (fake / "verl" / "model_merger").mkdir(parents=True)
    (fake / "verl" / "__init__.py").write_text("")
    (fake / "verl" / "model_merger" / "__init__.py").write_text("")
    (fake / "verl" / "model_merger" / "__main__.py").write_text(FAKE_MERGER)
    for step in (3, 6):
        actor = fake_verl_checkpoint(tmp_path / "ckpts" / f"global_step_{step}", huggingface=False)
        save_tiny_model(actor / "huggingface", seed=step)
    config = evaluation_config({"myverl": {"path": str(tmp_path / "ckpts"), **SETTINGS}})
    config["campaign"] = "verl"
    (world["work"] / "verl.yaml").write_text(yaml.safe_dump(config))
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
           "HF_HOME": str(world["hf_home"]), "HF_HUB_OFFLINE": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(fake), os.environ.get("PYTHONPATH")]))}
    result = subprocess.run([str(bin_dir / "snakemake"), "--cores", "2", "--configfile", "verl.yaml"],
                            cwd=world["work"], capture_output=True, text=True, env=env, timeout=900)
    assert result.returncode == 0, (result.stdout + result.stderr)[-6000:]
    run = world["work"] / "results/verl/myverl/external"
    for step in (3, 6):
        generation = json.loads((run / f"eval/step-{step:06d}/generation.json").read_text())
        assert generation["source"] == f"results/verl/myverl/external/merged/step-{step:06d}"
    record = json.loads((run / "checkpoint.json").read_text())
    assert record["kind"] == "run" and set(record["verl"]) == {"3", "6"}
    with (world["work"] / "results/verl/analysis/table1.csv").open() as handle:
        [row] = list(csv.DictReader(handle))
    assert (row["model"], row["last_step"]) == ("myverl", "6")


def test_a_grid_and_a_checkpoint_share_one_campaign(world):
    """configs/smoke.yaml plus a checkpoint: the grid's jobs as without it, and the checkpoint's evaluation,
    curve and MLflow run; Table 1 reads the cells and the checkpoint, the figures the cells only."""
    overlay = {"checkpoints": {"mine": {"path": str(world["local"]), **SETTINGS}}}
    (world["work"] / "mixed.yaml").write_text(yaml.safe_dump(overlay))
    grid = run_snakemake("-n", "--configfile", "configs/smoke.yaml", cwd=world["work"], hf_home=world["hf_home"])
    mixed = run_snakemake("-n", "-p", "--configfile", "configs/smoke.yaml", "mixed.yaml", cwd=world["work"],
                          hf_home=world["hf_home"])
    assert grid.returncode == mixed.returncode == 0, (mixed.stdout + mixed.stderr)[-3000:]
    added = {rule: n - job_counts(grid.stdout).get(rule, 0) for rule, n in job_counts(mixed.stdout).items()}
    assert {rule: n for rule, n in added.items() if n} == {
        "external_checkpoint": 1, "generate": 1, "score": 1, "collect_curve": 1, "mlflow_log_eval": 1, "total": 5}
    commands = {line.split(".py --campaign-dir", 1)[0].rsplit("/", 1)[1]: line for line in mixed.stdout.splitlines()
                if line.startswith("Shell command: python ") and ".py --campaign-dir" in line}
    assert {"table1", "figure1", "figure2", "figure3", "diagnosis", "comparison", "mechanism"} <= set(commands)
    assert "--checkpoints results/smoke/mine/external/checkpoint.json" in commands["table1"]
    assert "--cells results/smoke/tiny-s/" in commands["table1"]
    assert all("mine/external" not in line for name, line in commands.items() if name != "table1")
