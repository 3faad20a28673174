"""The workflow's console (balagg.snakemake_console, Snakemake's logger plugin ``balagg``): fed the records
Snakemake emits during a run, it prints the jobs to run, progress lines and every problem, not job blocks;
a dry run prints exactly what Snakemake's own console prints."""

from __future__ import annotations

import io
import logging
from types import SimpleNamespace

import pytest

pytest.importorskip("snakemake")

from snakemake_interface_logger_plugins.common import LogEvent  # noqa: E402

from balagg.snakemake_console import QUIET_SECONDS, Console, default_handler  # noqa: E402


def settings(dryrun=False):
    return SimpleNamespace(nocolor=True, quiet=set(), show_failed_logs=False, debug_dag=False, verbose=False,
                           dryrun=dryrun, printshellcmds=False, stdout=False)


def record(msg="", level=logging.INFO, **extra):
    return logging.makeLogRecord({"msg": msg, "levelno": level, "levelname": logging.getLevelName(level), **extra})


def job_info(jobid, rule="train", **wildcards):
    return record(f" Rule: {rule}, Jobid: {jobid}", event=LogEvent.JOB_INFO, jobid=jobid, rule_name=rule,
                  rule_msg=None, local=False, input=["in.txt"], output=[f"out/{jobid}.txt"], log=[], benchmark=None,
                  wildcards=wildcards, reason="Missing output files", resources={}, priority=0, threads=1,
                  indent=False, is_checkpoint=False, printshellcmd=True, is_handover=False, shellcmd="true")


def run_records(total=20):
    """What Snakemake emits for a run of ``total`` jobs (header, resources, job stats, each job's info,
    finished and progress records, routine lines)."""
    yield record(event=LogEvent.WORKFLOW_STARTED, workflow_id="x", snakefile="Snakefile")
    yield record("Building DAG of jobs...")
    yield record("Provided cores: 2", event=LogEvent.RESOURCES_INFO, cores=2)
    yield record("Job stats: ...", event=LogEvent.RUN_INFO, stats={"train": total - 1, "all": 1, "total": total})
    for jobid in range(total):
        yield record("Select jobs to execute...")
        yield record("Execute 1 jobs...")
        yield job_info(jobid, "train" if jobid < total - 1 else "all", model="tiny-s", seed=jobid)
        yield record(f"Finished jobid: {jobid}", event=LogEvent.JOB_FINISHED, job_id=jobid)
        yield record(event=LogEvent.PROGRESS, done=jobid + 1, total=total)
    yield record("Complete log(s): /abs/.snakemake/log/run.snakemake.log")


def console(stream, dryrun=False, **kwargs):
    return Console(stream, default_handler(settings(dryrun), stream), dryrun=dryrun, **kwargs)


def test_a_run_is_a_line_of_jobs_a_line_per_tenth_and_the_log_path():
    stream = io.StringIO()
    shown = console(stream, interactive=False)
    for item in run_records(20):
        shown.handle(item)
    shown.close()
    lines = stream.getvalue().splitlines()
    assert lines[0] == "20 jobs to run: train 19, all 1"
    progress = [line for line in lines if line.startswith("[")]
    assert len(progress) == 10 and progress[0] == "[ 2/20 jobs,  10%] done: train tiny-s/seed1"
    assert progress[-1] == "[20/20 jobs, 100%] done: all tiny-s/seed19"
    assert lines[-1] == "Complete log(s): /abs/.snakemake/log/run.snakemake.log"
    assert len(lines) == 12  # no header, no job blocks, no routine lines


def test_a_slow_stretch_still_prints_progress_and_problems_print_as_snakemake_prints_them():
    now = [0.0]
    stream = io.StringIO()
    shown = console(stream, interactive=False, clock=lambda: now[0])
    shown.handle(record(event=LogEvent.RUN_INFO, stats={"train": 100, "total": 100}))
    shown.handle(job_info(1, model="tiny-s"))
    shown.handle(record(event=LogEvent.PROGRESS, done=1, total=100))
    now[0] = QUIET_SECONDS + 1
    shown.handle(record(event=LogEvent.PROGRESS, done=2, total=100))
    shown.handle(record("balagg: a warning of the workflow", level=logging.WARNING))
    shown.handle(record("Error in rule train", level=logging.ERROR, event=LogEvent.JOB_ERROR, rule_name="train",
                        msg_="", rule_msg=None, jobid=1, input=[], output=["out/1.txt"], log=["logs/train.log"],
                        conda_env=None, shellcmd="python -m balagg train", aux={}, indent=False))
    text = stream.getvalue()
    assert "[  2/100 jobs,   2%] running train" in text  # a minute without a tenth done
    assert "[  1/100" not in text
    assert "balagg: a warning of the workflow" in text
    assert "Error in rule train:" in text and "log: logs/train.log (check log file(s) for error details)" in text


def test_on_a_terminal_progress_is_one_line_redrawn_in_place():
    stream = io.StringIO()
    shown = console(stream, interactive=True)
    for item in run_records(5):
        shown.handle(item)
    shown.handle(record("a warning", level=logging.WARNING))
    shown.close()
    text = stream.getvalue()
    assert text.count("\r\x1b[K") > 5
    lines = text.replace("\r\x1b[K", "\n").split("\n")
    assert "[5/5 jobs, 100%] done: all tiny-s/seed4" in lines and "a warning" in lines
    assert text.endswith("\n") and "rule train:" not in text
    # the last line stays put: what Snakemake prints after the last job (the log's path) comes below it
    assert text.index("[5/5 jobs, 100%] done: all tiny-s/seed4\n") < text.index("Complete log(s)")


def test_a_dry_run_prints_what_snakemakes_own_console_prints():
    ours, theirs = io.StringIO(), io.StringIO()
    shown, default = console(ours, dryrun=True), default_handler(settings(dryrun=True), theirs)
    for item in run_records(3):
        shown.handle(item)
        default.handle(item)
    assert ours.getvalue() == theirs.getvalue() and "rule train:" in ours.getvalue()


def test_snakemake_finds_the_plugin_and_the_workflow_profile_selects_it():
    from pathlib import Path

    import yaml
    from snakemake_interface_logger_plugins.registry import LoggerPluginRegistry

    assert "balagg" in LoggerPluginRegistry().plugins
    profile = yaml.safe_load((Path(__file__).resolve().parents[1] / "profiles/default/config.yaml").read_text())
    assert profile["logger"] == ["balagg"]
