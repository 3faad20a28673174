"""The Slurm profile and the conda environments, checked without a cluster.

The profile (slurm/config.v8+.yaml) is read through Snakemake's own profile parser, so these tests see
exactly the flags `snakemake --profile slurm` gets for a given environment."""

from __future__ import annotations

import re
import stat
import tomllib
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

from slurm_helpers import LOCAL_PROFILE, REPO, copy_workflow, parse_profile, resources_of, snakemake

ENV_VARS = ("BALAGG_SLURM_PARTITION", "BALAGG_SLURM_GPU_PARTITION", "BALAGG_SLURM_ACCOUNT", "BALAGG_SLURM_GPU_MODEL",
            "BALAGG_SLURM_JOBS", "BALAGG_SLURM_STATUS_COMMAND", "SBATCH_PARTITION", "SBATCH_ACCOUNT")
GPU_RULES = ("train", "generate")
WARNING = {"slurm_extra": "'--signal=URG@3600'"}
"""What the profile always asks for a train job: Slurm's warning signal an hour before its limit."""
# rule names the workflow uses; the profile must key its per-rule resources by exactly these
WORKFLOW_RULES = ("prepare_data", "mlflow_setup", "train", "generate", "score", "collect_curve", "table1",
                  "figure1", "figure2", "figure3", "diagnosis")


@pytest.fixture
def clean_env(monkeypatch):
    for name in ENV_VARS:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def fake_sacct(tmp_path: Path, exit_code: int) -> Path:
    """A folder holding an executable `sacct` that exits with `exit_code` (1 = accounting disabled)."""
    folder = tmp_path / f"sacct{exit_code}"
    folder.mkdir()
    script = folder / "sacct"
    script.write_text(f"#!/bin/sh\necho 'Slurm accounting storage is disabled' >&2\nexit {exit_code}\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return folder


def test_without_cluster_variables_no_partition_or_account_is_forced(clean_env):
    profile = parse_profile()
    assert profile["executor"] == "slurm"
    defaults = dict(entry.split("=", 1) for entry in profile["default-resources"])
    assert "slurm_partition" not in defaults and "slurm_account" not in defaults
    assert resources_of(profile, "train") == WARNING and resources_of(profile, "generate") == {}


def test_partition_account_and_gpu_model_come_from_the_environment(clean_env):
    clean_env.setenv("BALAGG_SLURM_PARTITION", "short")
    clean_env.setenv("BALAGG_SLURM_GPU_PARTITION", "gpu-a100")
    clean_env.setenv("BALAGG_SLURM_ACCOUNT", "proj42")
    clean_env.setenv("BALAGG_SLURM_GPU_MODEL", "a100")
    clean_env.setenv("BALAGG_SLURM_JOBS", "7")
    profile = parse_profile()
    defaults = dict(entry.split("=", 1) for entry in profile["default-resources"])
    assert defaults["slurm_partition"] == "'short'" and defaults["slurm_account"] == "'proj42'"
    assert profile["jobs"] == "7"
    for rule in GPU_RULES:
        assert resources_of(profile, rule) == {"slurm_partition": "'gpu-a100'", "gpu_model": "'a100'",
                                               **(WARNING if rule == "train" else {})}
    assert "slurm_partition" not in resources_of(profile, "score")


def test_gpu_partition_falls_back_to_the_cpu_partition_and_sbatch_variables(clean_env):
    clean_env.setenv("SBATCH_PARTITION", "main")
    clean_env.setenv("SBATCH_ACCOUNT", "lab")
    profile = parse_profile()
    defaults = dict(entry.split("=", 1) for entry in profile["default-resources"])
    assert defaults["slurm_partition"] == "'main'" and defaults["slurm_account"] == "'lab'"
    assert resources_of(profile, "train") == {"slurm_partition": "'main'", **WARNING}


def test_profile_leaves_gpu_counts_to_the_workflow(clean_env):
    """set-resources override a rule's own resources; the GPU count must stay the config's, which also
    sizes `accelerate launch`, so the profile only says where GPU jobs run."""
    clean_env.setenv("BALAGG_SLURM_GPU_PARTITION", "gpu")
    clean_env.setenv("BALAGG_SLURM_GPU_MODEL", "h100")
    profile = parse_profile()
    for rule in GPU_RULES:
        assert set(resources_of(profile, rule)) == {"slurm_partition", "gpu_model", *(WARNING if rule == "train" else ())}
    rules_in_profile = {entry.split(":", 1)[0] for entry in profile["set-resources"]}
    assert rules_in_profile <= set(WORKFLOW_RULES), rules_in_profile - set(WORKFLOW_RULES)
    for rule in set(WORKFLOW_RULES) - set(GPU_RULES):
        assert "gpu" not in resources_of(profile, rule) and "gres" not in resources_of(profile, rule)


@pytest.mark.parametrize(("sacct_exit", "expected"), [(0, "sacct"), (1, "squeue"), (None, "squeue")])
def test_status_command_avoids_sacct_when_accounting_is_off(clean_env, tmp_path, sacct_exit, expected):
    """The plugin picks sacct whenever the binary exists; without slurmdbd sacct exits 1 and the run
    never sees a job finish. The profile probes sacct and falls back to squeue."""
    folder = fake_sacct(tmp_path, sacct_exit) if sacct_exit is not None else tmp_path
    clean_env.setenv("PATH", str(folder))
    assert parse_profile()["slurm-status-command"] == expected


def test_status_command_can_be_forced(clean_env, tmp_path):
    clean_env.setenv("PATH", str(fake_sacct(tmp_path, 1)))
    clean_env.setenv("BALAGG_SLURM_STATUS_COMMAND", "sacct")
    assert parse_profile()["slurm-status-command"] == "sacct"


def test_snakemake_accepts_the_profile_and_the_local_override(clean_env, tmp_path):
    """A dry run resolves every key of both profiles (an unknown flag or resource would fail here)."""
    work = copy_workflow(tmp_path)
    result = snakemake("--profile", "slurm", "--profile", str(LOCAL_PROFILE), "-n", cwd=work,
                       env={"BALAGG_SLURM_PARTITION": "cpu", "BALAGG_SLURM_ACCOUNT": "acct"}, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    log = result.stdout + result.stderr
    assert "rule score:" in log and "slurm_partition=cpu" in log and "slurm_account=acct" in log
    assert not (work / "results").exists()


def test_train_jobs_ask_for_a_warning_signal_the_plugin_passes_to_sbatch(clean_env):
    """The trainer stops at its next generation cycle on SIGURG (balagg.processes.STOP_SIGNALS); the profile
    asks Slurm for it an hour before a train job's limit, through the plugin's slurm_extra, which the
    plugin checks and appends to the sbatch call as it is."""
    from types import SimpleNamespace

    from snakemake_executor_plugin_slurm.validation import validate_slurm_extra

    from balagg.processes import STOP_SIGNALS

    from balagg.train.deadline import WARNING_LEAD_S, WARNING_SIGNAL

    extra = eval(resources_of(parse_profile(), "train")["slurm_extra"])  # a resource expression, as Snakemake reads it
    assert extra == "--signal=URG@3600"
    validate_slurm_extra(SimpleNamespace(resources=SimpleNamespace(slurm_extra=extra)))  # raises if refused
    signal_name, seconds = extra.removeprefix("--signal=").split("@")
    import signal

    assert getattr(signal, f"SIG{signal_name}") == WARNING_SIGNAL and WARNING_SIGNAL in STOP_SIGNALS
    assert int(seconds) == WARNING_LEAD_S  # the lead the trainer counts on


@pytest.mark.slow
def test_score_jobs_run_a_verifier_per_cpu_they_get(clean_env, tmp_path):
    """A score job's verifier workers are its cpus_per_task: what the Slurm profile gives it (the verifier's
    default workers, and the plugin's --cpus-per-task), and one in a run without the profile."""
    from balagg.settings import VERIFIER

    assert resources_of(parse_profile(), "score")["cpus_per_task"] == str(VERIFIER.workers) == "2"
    work = copy_workflow(tmp_path)
    for profile, workers in ((["--profile", "slurm"], VERIFIER.workers), ([], 1)):
        result = snakemake(*profile, "-n", "-p", cwd=work, env={"BALAGG_SLURM_PARTITION": "cpu"}, timeout=180)
        assert result.returncode == 0, result.stderr[-3000:]
        scores = [job for job in (result.stdout + result.stderr).split("\n\n") if "rule score:" in job]
        assert scores and all(f"--workers {workers} " in job for job in scores), scores[0]


# ---- conda environments

ENV_EXTRAS = {"gpu": ("train", "eval", "gpu"), "cpu": ("train", "eval", "workflow", "lighteval")}
"""The extras of pyproject.toml whose packages each conda env must hold (it holds dependencies only)."""


def load_env(name: str) -> dict:
    return yaml.safe_load((REPO / "envs" / f"{name}.yaml").read_text())


def pip_section(env: dict) -> list[str]:
    sections = [dep["pip"] for dep in env["dependencies"] if isinstance(dep, dict)]
    assert len(sections) == 1, "one pip: section"
    return sections[0]


def pinned(env: dict) -> dict[str, Requirement]:
    reqs = [Requirement(line) for line in pip_section(env) if not line.startswith("-")]
    return {req.name.lower(): req for req in reqs}


def project_pins() -> dict[str, Requirement]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    # the verl extra lives in an environment of its own (its transformers pin differs; .ci/verl-tests)
    reqs = [Requirement(r) for r in project["dependencies"]
            + [r for name, group in extras.items() if name != "verl" for r in group]]
    return {req.name.lower(): req for req in reqs}


@pytest.mark.parametrize("name", ["gpu", "cpu"])
def test_conda_env_is_valid_and_holds_dependencies_only(name):
    """Snakemake builds an env from a copy of its file under .snakemake/conda/ (9.27 deployment/conda.py,
    create_env), so a relative path in it (`-e ..`) would not name the repository: the envs hold every
    dependency of balagg and no path; the rules put the checkout's src/ on PYTHONPATH instead (run for real in
    test_workflow_cluster.py::test_fetch_runs_the_checkouts_code_and_records_revisions)."""
    env = load_env(name)
    assert set(env) >= {"name", "channels", "dependencies"}
    conda_deps = [dep for dep in env["dependencies"] if isinstance(dep, str)]
    assert "pip" in conda_deps
    python = [dep.split("=", 1)[1] for dep in conda_deps if dep.startswith("python=")]
    requires = SpecifierSet(tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["requires-python"])
    assert len(python) == 1 and requires.contains(python[0] + ".0"), f"python={python} outside {requires}"
    local = [line for line in pip_section(env) if line.startswith(("-e", "--editable", ".", "/", "file:"))]
    assert not local, f"{name}.yaml installs a path: {local}"
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    extras = project.get("optional-dependencies", {})
    # what the env's rules import: the core, and the extras of that name where pyproject has them (the
    # workflow engine itself runs on the submit host, outside the env)
    wanted = project["dependencies"] + [r for extra in ENV_EXTRAS[name] for r in extras.get(extra, [])]
    missing = {Requirement(r).name.lower() for r in wanted if not r.startswith("snakemake")} - set(pinned(env))
    assert not missing, f"{name}.yaml lacks balagg's dependencies {sorted(missing)}"


@pytest.mark.parametrize("name", ["gpu", "cpu"])
def test_conda_env_pins_match_the_project(name):
    """Every package both pin must accept the same versions (pyproject.toml is the reference)."""
    project = project_pins()
    shared = {pkg: req for pkg, req in pinned(load_env(name)).items() if pkg in project}
    assert "torch" in shared and "transformers" in shared
    for pkg, req in shared.items():
        # a local label (2.13.0+cpu) names a build of the same version
        public = SpecifierSet(re.sub(r"\+[A-Za-z0-9.]+", "", str(req.specifier)))
        assert public == project[pkg].specifier, f"{name}.yaml pins {req}, pyproject.toml {project[pkg]}"


def test_gpu_env_has_the_gpu_stack_and_cpu_env_the_cpu_wheel():
    gpu = pinned(load_env("gpu"))
    assert {"torch", "transformers", "trl", "vllm", "accelerate"} <= set(gpu)
    assert str(gpu["torch"].specifier) == "==2.13.0" and str(gpu["vllm"].specifier) == "==0.31.0"
    assert gpu["transformers"].specifier.contains("5.17.3") and not gpu["transformers"].specifier.contains("5.18.0")
    cpu_env = load_env("cpu")
    cpu = pinned(cpu_env)
    assert "vllm" not in cpu and str(cpu["torch"].specifier) == "==2.13.0+cpu"
    assert "lighteval" in cpu
    assert any(line.startswith("--extra-index-url https://download.pytorch.org/whl/cpu") for line in pip_section(cpu_env))


def test_every_conda_directive_names_an_existing_env():
    """`conda:` paths are relative to the .smk file that holds them."""
    rule_files = [REPO / "Snakefile", *sorted((REPO / "workflow" / "rules").glob("*.smk"))]
    directives = []
    for rule_file in rule_files:
        lines = rule_file.read_text().splitlines()
        directives += [(rule_file, lines[i + 1].strip().strip("\"'")) for i, line in enumerate(lines)
                       if line.strip() == "conda:"]
    if not directives:
        pytest.skip("no rule declares a conda: environment yet")
    for rule_file, path in directives:
        assert (rule_file.parent / path).resolve().is_file(), f"{rule_file.name}: {path}"
