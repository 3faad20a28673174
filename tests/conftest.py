"""The two lanes of the suite: ``make test`` runs every test; ``make test-fast`` (``pytest -m "not slow"``)
leaves out the ``slow`` ones, for the inner loop.

``slow`` is every test that runs Snakemake, the pipeline, a training run end to end, a bench, a fresh
process that imports the whole ML stack or sets up an MLflow store, or the job server's or the code
sandbox's processes: those marked in their own modules, and, marked here at collection, every test of
:data:`SLOW_MODULES`, every test that uses a fixture of :data:`SLOW_FIXTURES` (a scratch copy of the
workflow, which the tests use to run Snakemake in) and the tests of :data:`SLOW_TESTS`.
"""

from __future__ import annotations

import os

import pytest

SLOW_MODULES = frozenset({
    "test_benches.py",  # every bench script's quick run
    "test_exactly_once.py",  # launchers and trainers killed and resumed
    "test_jobserver.py",  # fork servers, their clients and jobs as processes
    "test_lcb_conformance.py",  # programs run in the code sandbox, timeouts included
    "test_sandbox.py",
    "test_train_equivalence.py",  # TRL trainings compared step by step
    "test_train_minibatches.py",
    "test_train_padding.py",
    "test_workflow.py",  # Snakemake dry runs and runs of the workflow
    "test_workflow_evaluate_example.py",  # configs/evaluate.yaml run through Snakemake
    "test_workflow_cluster.py",
    "test_workflow_context.py",
    "test_workflow_external_checkpoints.py",  # an evaluation-only campaign run, bad checkpoints in dry runs
})
"""Test modules whose every test is slow."""

SLOW_FIXTURES = frozenset({"workdir", "checkout"})
"""Fixtures that copy the workflow for a Snakemake run."""

SLOW_TESTS = frozenset({
    # a warm-started tiny model, a fresh process that imports the whole ML stack or sets up an MLflow
    # store, a bench script
    "test_gpu_smoke.py::test_without_a_gpu_it_says_so_and_measures_nothing",
    "test_imports.py::test_tracking_setup_imports_mlflow_but_no_ml_stack",
    "test_jobserver.py::test_the_real_preload_leaves_the_server_able_to_fork",
    "test_tinyworld_cli.py::test_walk_world_and_its_regime_through_the_commands",
    # Snakemake
    "test_errors.py::test_a_misspelled_config_key_is_one_line_without_the_schema",
    "test_plan.py::test_the_plan_rule_writes_what_the_command_prints",
    "test_rehearsal.py::test_rehearsal_dag_builds_with_the_papers_settings",
    "test_slurm_profile.py::test_snakemake_accepts_the_profile_and_the_local_override",
    "test_tinyworld_walks.py::test_one_campaign_trains_and_evaluates_each_model_on_its_familys_files",
    "test_tinyworld_walks.py::test_a_walk_model_with_a_real_benchmark_is_refused_in_one_line",
})
"""Single slow tests (module::function)."""


def pytest_collection_modifyitems(config, items):
    for item in items:
        module = item.path.name
        test = f"{module}::{item.originalname}"
        if module in SLOW_MODULES or test in SLOW_TESTS or SLOW_FIXTURES & set(item.fixturenames):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(autouse=True)
def _environment_restored():
    """Each test ends with the environment it started with. Libraries run in-process set variables there
    (TRL's colocated vLLM start sets RANK, WORLD_SIZE and MASTER_PORT; accelerate its precision), and every
    later subprocess would inherit them: a single-process training would then start a distributed group on
    port 29500, racing a test that runs beside it (``make test`` runs two workers)."""
    saved = dict(os.environ)
    yield
    if os.environ != saved:
        os.environ.clear()
        os.environ.update(saved)
