"""Chaos test (CI step `.ci/chaos`): the smoke grid under seeded kill -9, compared with an undisturbed run.

    python tests/chaos.py --work /tmp/chaos [--seed 0] [--kills 8] [--cores 2] [--budget-s 600]

1. An undisturbed run of the smoke grid (configs/smoke.yaml) in WORK/reference.
2. The same grid in WORK/chaos, started again and again: in each round, at a seeded random moment
   (uniform in [1 s, a quarter of the reference's duration]), ``kill -9`` either Snakemake itself
   (probability 1/4; its running jobs are left orphaned, as when a login session dies) or one seeded
   random ``python`` process among its jobs (train, generate, score, curve, analysis, MLflow logging,
   the verifier workers...; not the code sandboxes, :data:`SPARED`). The next round unlocks and reruns with --rerun-incomplete. After
   ``--kills`` kills (or ``--budget-s`` of rounds) the grid is rerun until Snakemake succeeds.
3. Comparison: every file under results/smoke/ identical, byte for byte, after :func:`normalise` drops
   the wall-clock fields (seconds, step_seconds, tokens_per_s, ...), the run-specific ids and the
   folder name, and PDF creation dates; logs, benchmark timings, lock files and the MLflow store itself
   are not compared as files. A finished cell keeps no resumable state in either tree (the trainer
   removes it), so a state that a kill left behind is a difference. The MLflow store instead: exactly one live
   (not superseded) run per cell, no (key, step) logged twice in any run, the same points as the
   reference run's (wall-clock keys aside), one analysis run.

With ``--job-server`` the disturbed tree runs under `balagg jobserver`: the kill moment counts from
the first job the server forks (the jobs started during its preload wait for it), a kill of a job
picks among the jobs forked by the server and the ``python -m balagg`` clients waiting for them (the
kills of ordinary jobs are the plain run's), and the server itself is a target as Snakemake is.

Prints the kills (what, when) and the comparison, writes WORK/chaos-report.json, exits 1 on any
difference. Deterministic given the seed except for the moments the scheduler picks.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from checkout import copy_workflow  # noqa: E402 - tests/ is on sys.path: this script's folder
# Each tree is a copy of the workflow with its own src/ (tests/checkout.py; jobs import <tree>/src), so
# both trees run the same code even if the repository changes meanwhile, and record the same
# git_commit (none: the trees are outside git).
CAMPAIGN = "smoke"
WALL_CLOCK_KEY = re.compile(r"(^|[_/])(seconds|cpu_seconds|step_seconds|tokens_per_s|elapsed|duration|"
                            r"timestamp|started|finished|created|wall_s|time)$")
RUN_ID = re.compile(r"\b[0-9a-f]{32}\b")
SPARED = ("sandbox_launcher", "resource_tracker")
"""Processes never killed: a code sample's sandbox (its death is the sample's failure, by design) and
multiprocessing's bookkeeping."""
SKIPPED_PARTS = ("logs", "benchmarks", "mlartifacts")
SKIPPED_NAMES = ("train.log", "train.lock", "mlflow.db", "mlflow.db.setup.lock", "mlflow.db.write.lock",
                 "stopped.json", "report.html")  # the report embeds the compared artifacts plus Snakemake's run times
ID_FILES = ("mlflow_run_id",)
"""Plain-text files that hold only a run id (another store, another id)."""


# ---- normalising and comparing output trees --------------------------------------------------------

def _strip(value, root: str):
    if isinstance(value, dict):
        return {k: _strip(v, root) for k, v in value.items() if not WALL_CLOCK_KEY.search(k)}
    if isinstance(value, list):
        return [_strip(v, root) for v in value]
    if isinstance(value, str):
        return RUN_ID.sub("<id>", value.replace(root, "<root>"))
    return value


def normalise(path: Path, root: Path) -> bytes:
    """The bytes of ``path`` that must not depend on the run: JSON/JSONL without wall-clock keys, ids
    and the tree's own folder; PDFs without their creation date; everything else as it is."""
    data = path.read_bytes()
    text_root = str(root.resolve())
    if path.suffix == ".json":
        return json.dumps(_strip(json.loads(data), text_root), sort_keys=True).encode()
    if path.suffix == ".jsonl":
        lines = [json.dumps(_strip(json.loads(line), text_root), sort_keys=True)
                 for line in data.decode().splitlines() if line.strip()]
        return "\n".join(lines).encode()
    if path.suffix == ".pdf":
        return re.sub(rb"/CreationDate \([^)]*\)", b"", data)
    if path.suffix in (".csv", ".md", ".tex", ".txt") or path.name in ID_FILES:
        return RUN_ID.sub("<id>", data.decode().replace(text_root, "<root>")).encode()
    return data


def compared_files(results: Path) -> list[str]:
    files = []
    for path in results.rglob("*"):
        relative = path.relative_to(results)
        if not path.is_file() or path.name in SKIPPED_NAMES or path.name.startswith("."):
            continue
        if any(part in SKIPPED_PARTS for part in relative.parts[:-1]):
            continue
        files.append(str(relative))
    return sorted(files)


def compare_trees(reference: Path, chaos: Path) -> dict:
    """Files missing on either side and files whose normalised bytes differ."""
    ref_files, chaos_files = set(compared_files(reference)), set(compared_files(chaos))
    differing = [name for name in sorted(ref_files & chaos_files)
                 if normalise(reference / name, reference.parents[1]) != normalise(chaos / name, chaos.parents[1])]
    return {"compared": len(ref_files & chaos_files), "only_reference": sorted(ref_files - chaos_files),
            "only_chaos": sorted(chaos_files - ref_files), "differing": differing}


def mlflow_points(database: Path) -> dict:
    """cell -> {"live": n, "superseded": n, "duplicates": [...], "points": {key: {step: value}}}, plus
    the number of analysis runs."""
    import mlflow

    client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{database}")
    experiment = client.get_experiment_by_name(CAMPAIGN)
    from mlflow.entities import ViewType

    runs = client.search_runs([experiment.experiment_id], max_results=1000, run_view_type=ViewType.ALL)  # superseded: deleted
    cells: dict[str, dict] = {}
    analysis = 0
    for run in runs:
        if run.data.tags.get("kind") == "analysis":
            analysis += 1
            continue
        cell = cells.setdefault(run.data.tags.get("cell", "?"), {"live": 0, "superseded": 0, "duplicates": [],
                                                                 "points": {}})
        if "superseded_by" in run.data.tags:
            cell["superseded"] += 1
            continue
        cell["live"] += 1
        for key in run.data.metrics:
            history = client.get_metric_history(run.info.run_id, key)
            steps = [point.step for point in history]
            if len(steps) != len(set(steps)):
                cell["duplicates"].append(key)
            if not WALL_CLOCK_KEY.search(key):
                cell["points"][key] = {point.step: point.value for point in history}
    return {"cells": cells, "analysis_runs": analysis}


def compare_mlflow(reference: Path, chaos: Path) -> dict:
    ref, got = mlflow_points(reference / "mlflow.db"), mlflow_points(chaos / "mlflow.db")
    problems = []
    if got["analysis_runs"] != 1:
        problems.append(f"{got['analysis_runs']} analysis runs")
    if sorted(got["cells"]) != sorted(ref["cells"]):
        problems.append(f"cells {sorted(got['cells'])} != {sorted(ref['cells'])}")
    for name, cell in got["cells"].items():
        if cell["live"] != 1:
            problems.append(f"{name}: {cell['live']} live runs")
        if cell["duplicates"]:
            problems.append(f"{name}: duplicate points in {cell['duplicates']}")
        if name in ref["cells"] and cell["points"] != ref["cells"][name]["points"]:
            keys = [k for k in set(cell["points"]) | set(ref["cells"][name]["points"])
                    if cell["points"].get(k) != ref["cells"][name]["points"].get(k)]
            problems.append(f"{name}: points differ in {sorted(keys)[:8]}")
    return {"problems": problems,
            "superseded_runs": sum(cell["superseded"] for cell in got["cells"].values())}


# ---- running and killing -----------------------------------------------------------------------------

def prepare(folder: Path) -> None:
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    copy_workflow(folder)


def snakemake_command(cores: int, *extra: str, job_server: bool = False) -> list[str]:
    """Snakemake on the smoke grid; with ``job_server``, under `python -m balagg jobserver` (as `make demo`)."""
    command = [str(Path(sys.executable).parent / "snakemake"), "--cores", str(cores), "--configfile",
               "configs/smoke.yaml", *extra]
    return [sys.executable, "-m", "balagg", "jobserver", "--", *command] if job_server else command


def _cmdline(process) -> list[str]:
    try:
        return process.cmdline()
    except Exception:  # noqa: BLE001 - it may be gone
        return []


def is_snakemake(process) -> bool:
    return any(os.path.basename(word) == "snakemake" for word in _cmdline(process)[:2])


def environment(folder: Path) -> dict:
    """Snakemake's environment for one tree: the venv first on PATH, the tree's own src/ importable."""
    bin_dir = Path(sys.executable).parent
    return {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
            "PYTHONPATH": f"{folder / 'src'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}".rstrip(os.pathsep)}


def job_processes(root_pid: int) -> list:
    """The python processes among Snakemake's descendants (its jobs and their children); under the job
    server (the root), also the jobs forked from it, never Snakemake itself."""
    import psutil

    try:
        children = psutil.Process(root_pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    found = []
    for process in children:
        try:
            words = process.cmdline()
            if any(mark in " ".join(words) for mark in SPARED) or is_snakemake(process):
                continue
            if "python" in os.path.basename(words[0]) or "python" in process.name():
                found.append(process)
        except (psutil.NoSuchProcess, psutil.AccessDenied, IndexError):
            continue
    return found


SERVED_JOB = "a job forked by the job server"


def describe(process) -> str:
    try:
        words = process.cmdline()
    except Exception:  # noqa: BLE001 - it may be gone
        return "?"
    text = " ".join(words)
    if " -m balagg jobserver " in text:
        return SERVED_JOB
    match = re.search(r"-m balagg (\w[\w-]*(?: \w+)?)", text)
    return match.group(1) if match else os.path.basename(words[1]) if len(words) > 1 else words[0]


def run_round(folder: Path, cores: int, rng: random.Random, kill_after: float | None, log,
              job_server: bool = False) -> dict:
    """One Snakemake run; if ``kill_after`` is set, kill -9 something at that moment: a job, or
    Snakemake (under the job server: Snakemake or the server, at even odds)."""
    subprocess.run(snakemake_command(cores, "--unlock"), cwd=folder, env=environment(folder), capture_output=True)
    started = time.monotonic()
    with open(folder / "chaos-snakemake.log", "a") as out:
        process = subprocess.Popen(snakemake_command(cores, "--rerun-incomplete", job_server=job_server), cwd=folder,
                                   env=environment(folder), stdout=out, stderr=subprocess.STDOUT)
        kill = None
        if kill_after is not None:
            clock = started
            if job_server:  # the moment counts from the first served job: the kills land where the server works
                while process.poll() is None and not any(describe(job) == SERVED_JOB for job in job_processes(process.pid)):
                    time.sleep(0.1)
                clock = time.monotonic()
            while process.poll() is None and time.monotonic() - clock < kill_after:
                time.sleep(0.05)
            if process.poll() is None:
                jobs = job_processes(process.pid)
                served = [job for job in jobs if describe(job) == SERVED_JOB]
                if job_server and served:  # the jobs this mode is about, and their clients
                    jobs = served + [job for job in jobs if describe(job) not in (SERVED_JOB, "?")
                                     and " -m balagg " in " ".join(_cmdline(job))]
                if jobs and rng.random() >= 0.25:
                    victim = rng.choice(sorted(jobs, key=lambda p: p.pid))
                    kill = {"at_s": round(time.monotonic() - started, 1), "target": describe(victim)}
                    try:
                        victim.send_signal(signal.SIGKILL)
                    except Exception:  # noqa: BLE001 - it ended meanwhile
                        kill["target"] += " (already gone)"
                elif job_server and rng.random() < 0.5:
                    # Snakemake gets SIGTERM when its server dies (balagg.jobserver): let it finish stopping
                    kill = {"at_s": round(time.monotonic() - started, 1), "target": "jobserver"}
                    snakemakes = [child for child in _children(process.pid) if is_snakemake(child)]
                    process.send_signal(signal.SIGKILL)
                    _wait_gone(snakemakes)
                else:
                    kill = {"at_s": round(time.monotonic() - started, 1), "target": "snakemake"}
                    target = [child for child in _children(process.pid) if is_snakemake(child)] if job_server else []
                    (target[0] if target else process).send_signal(signal.SIGKILL)
                log(f"kill -9 {kill['target']} at {kill['at_s']} s")
        code = process.wait()
    return {"returncode": code, "seconds": round(time.monotonic() - started, 1), "kill": kill}


def _wait_gone(processes, timeout: float = 120.0) -> None:
    import psutil

    psutil.wait_procs(processes, timeout=timeout)


def _children(pid: int) -> list:
    import psutil

    try:
        return psutil.Process(pid).children()
    except psutil.NoSuchProcess:
        return []


def wait_for_orphans(folder: Path, timeout: float = 300.0) -> None:
    """Jobs orphaned by a killed Snakemake go on; let them end before the final comparison."""
    import psutil

    deadline = time.monotonic() + timeout
    mark = str(folder.resolve())
    while time.monotonic() < deadline:
        alive = []
        for process in psutil.process_iter(["cmdline", "cwd"]):
            try:
                if process.info["cwd"] and process.info["cwd"].startswith(mark) and process.pid != os.getpid():
                    alive.append(process)
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
        if not alive:
            return
        time.sleep(1.0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--kills", type=int, default=8)
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--budget-s", type=float, default=600.0, help="stop killing after this long")
    parser.add_argument("--max-rounds", type=int, default=40)
    parser.add_argument("--job-server", action="store_true",
                        help="run the disturbed tree under `balagg jobserver` (the reference runs without)")
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)

    def log(message: str) -> None:
        print(f"[chaos {time.strftime('%H:%M:%S')}] {message}", flush=True)

    reference, chaos = args.work / "reference", args.work / "chaos"
    prepare(reference)
    log("undisturbed reference run")
    ref = run_round(reference, args.cores, rng, None, log)
    if ref["returncode"] != 0:
        log(f"the reference run failed (see {reference / 'chaos-snakemake.log'})")
        return 1
    log(f"reference: {ref['seconds']} s")

    prepare(chaos)
    rounds, kills, started = [], [], time.monotonic()
    while len(rounds) < args.max_rounds:
        killing = len(kills) < args.kills and time.monotonic() - started < args.budget_s
        delay = rng.uniform(1.0, max(2.0, ref["seconds"] / 4)) if killing else None
        result = run_round(chaos, args.cores, rng, delay, log, job_server=args.job_server)
        rounds.append(result)
        if result["kill"]:
            kills.append(result["kill"])
            if result["kill"]["target"] in ("snakemake", "jobserver"):
                time.sleep(1.0)  # its orphans go on; the next round must cope with them
        elif result["returncode"] == 0 and not killing:
            break
        elif result["returncode"] == 0 and killing and delay is not None:
            break  # finished before the kill moment: nothing left to disturb
    wait_for_orphans(chaos)
    final = run_round(chaos, args.cores, rng, None, log, job_server=args.job_server)  # what orphans left
    done = final["returncode"] == 0
    files = compare_trees(reference / "results" / CAMPAIGN, chaos / "results" / CAMPAIGN)
    tracking = compare_mlflow(reference / "results" / CAMPAIGN, chaos / "results" / CAMPAIGN)
    report = {"seed": args.seed, "kills": kills, "rounds": len(rounds) + 1, "finished": done,
              "reference_seconds": ref["seconds"], "chaos_seconds": round(time.monotonic() - started, 1),
              "files": files, "mlflow": tracking}
    (args.work / "chaos-report.json").write_text(json.dumps(report, indent=2) + "\n")
    log(f"{len(kills)} kills ({', '.join(k['target'] for k in kills)}) in {len(rounds) + 1} rounds; "
        f"finished: {done}")
    log(f"files: {files['compared']} compared, {len(files['differing'])} differ {files['differing'][:10]}, "
        f"missing {files['only_reference'][:10]}, extra {files['only_chaos'][:10]}")
    log(f"MLflow: {tracking['problems'] or 'one live run per cell, no duplicate point, same points'}; "
        f"{tracking['superseded_runs']} superseded runs")
    ok = done and not (files["differing"] or files["only_reference"] or files["only_chaos"] or tracking["problems"])
    log("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
