"""What a launched training really runs, against what its accelerate config asked for (accelerate
runs an FSDP config as plain DDP on CPU without saying so; the manifest must say it)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")
from accelerate.utils import DistributedType  # noqa: E402

from balagg.train.launch import accelerate_packages  # noqa: E402
from balagg.train.run import distributed_report  # noqa: E402

FSDP2 = str(Path(__file__).resolve().parents[1] / "configs" / "accelerate" / "fsdp2.yaml")


def accelerator(kind, device="cpu", plugin=None):
    return SimpleNamespace(distributed_type=kind, num_processes=2, device=torch.device(device),
                           mixed_precision="bf16", state=SimpleNamespace(fsdp_plugin=plugin))


def test_fsdp_config_run_as_ddp_on_cpu_is_reported_as_a_fallback():
    report = distributed_report(accelerator(DistributedType.MULTI_CPU), FSDP2)
    assert report == {"requested": "FSDP", "distributed_type": "MULTI_CPU", "fsdp_version": None, "num_processes": 2,
                      "device": "cpu", "mixed_precision": "bf16", "fell_back": True}


def test_fsdp2_on_gpus_is_not_a_fallback():
    report = distributed_report(accelerator(DistributedType.FSDP, plugin=SimpleNamespace(fsdp_version=2)), FSDP2)
    assert report["distributed_type"] == "FSDP" and report["fsdp_version"] == 2 and not report["fell_back"]


def test_no_accelerate_config_asks_for_nothing():
    assert not distributed_report(accelerator(DistributedType.NO), None)["fell_back"]


def test_backend_packages_of_accelerate_configs(tmp_path):
    (tmp_path / "ds.yaml").write_text("distributed_type: DEEPSPEED\n")
    (tmp_path / "bad.yaml").write_text("num_processes: 2\n")
    assert accelerate_packages(tmp_path / "ds.yaml") == ["deepspeed"] and accelerate_packages(FSDP2) == []
    with pytest.raises(ValueError, match="bad.yaml has no distributed_type"):
        accelerate_packages(tmp_path / "bad.yaml")


def test_the_launcher_trains_one_process_in_its_own_and_several_as_train_workers(monkeypatch, tmp_path):
    """``balagg train`` reads the cell config once: one process trains in the launcher (no second
    interpreter reads it again), several run ``balagg train-worker`` under accelerate; the job's start time
    is the launcher's either way (the time limit counts from it)."""
    import json
    import os
    import sys

    from balagg.cli import main
    from balagg.train import config, launch, run
    from balagg.train.deadline import START_ENV

    loads, calls = [], []
    load = config.CellConfig.load.__func__
    monkeypatch.setattr(config.CellConfig, "load", classmethod(lambda cls, path: loads.append(path) or load(cls, path)))
    monkeypatch.setattr(run, "train", lambda cell, workdir, manifest, invalidate=(): calls.append(
        ("in-process", os.environ.get(START_ENV), list(invalidate))) or 0)
    monkeypatch.setattr(launch, "run_launched", lambda command, workdir, invalidate=(): calls.append(
        ("child", command, list(invalidate))) or 75)
    monkeypatch.delenv(START_ENV, raising=False)
    base = {"model": "m", "train_files": ["t.jsonl"], "aggregator": "seq-agg", "seed": 0, "num_generations": 4,
            "prompts_per_step": 8, "mini_batches": 2, "micro_batch_size": 2, "save_every": 4}
    args = ["--workdir", str(tmp_path / "w"), "--out", str(tmp_path / "m.json"), "--invalidate", "eval"]
    for name, settings in (("one", {}), ("two", {"num_processes": 2, "accelerate_config": FSDP2})):
        (tmp_path / f"{name}.json").write_text(json.dumps(base | settings))

    assert main(["train", "--cell", str(tmp_path / "one.json"), *args]) == 0
    assert calls == [("in-process", os.environ[START_ENV], ["eval"])] and len(loads) == 1
    assert main(["train", "--cell", str(tmp_path / "two.json"), *args]) == 75
    command = calls[1][1]
    assert command[:3] == [sys.executable, "-m", "balagg.train.agent"] and "--num_processes" in command
    assert command[command.index(FSDP2) + 1:] == ["-m", "balagg", "train-worker", "--cell", str(tmp_path / "two.json"),
                                                 "--workdir", str(tmp_path / "w"), "--out", str(tmp_path / "m.json")]
    assert calls[1][2] == ["eval"] and len(loads) == 2  # the launcher removes the derived outputs, once


def _tree(root: int) -> list[int]:
    """``root`` and every process below it (from /proc), parents first."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        pid, ppid = int(text.split(" ", 1)[0]), int(text.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(pid)
    tree, queue = [], [root]
    while queue:
        pid = queue.pop(0)
        tree.append(pid)
        queue += children.get(pid, [])
    return tree


@pytest.fixture(scope="module")
def two_process_cell(tmp_path_factory):
    """A tiny model and data, and a cell trained by 2 processes under the paper's fsdp2.yaml (on a CPU
    accelerate runs it as MULTI_CPU): a generation cycle of 2 steps, a resumable checkpoint every cycle."""
    import json

    pytest.importorskip("trl")
    from tiny_cell import addition_rows, write_cell_inputs

    root = tmp_path_factory.mktemp("two-process-cell")
    cell = {
        **write_cell_inputs(root, addition_rows()), "seed": 3, "learning_rate": 1e-3, "warmup_steps": 1,
        "num_generations": 2, "prompts_per_step": 4, "mini_batches": 2, "micro_batch_size": 2,
        "max_prompt_length": 64, "max_completion_length": 8, "overlong_buffer_len": 4, "total_steps": 40,
        "save_every": 2, "keep_checkpoints": 2, "verifier_workers": 1, "num_processes": 2,
        "accelerate_config": FSDP2,
    }
    (root / "cell.json").write_text(json.dumps(cell))
    return root / "cell.json"


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="finds the process tree in /proc")
@pytest.mark.parametrize("target", ["launcher", "every process"])
def test_a_stop_signal_to_a_two_process_launch_stops_every_rank_at_a_checkpoint_and_exits_75(
        two_process_cell, tmp_path, target):
    """``balagg train`` of a 2-process cell (accelerate launch -> torchrun's agent -> 2 ranks):
    SIGUSR1 to the launcher (a person, Slurm's ``--signal=B:USR1``), or SIGTERM to every process of the tree
    at once (Slurm's time limit, scancel, preemption), stops both ranks at a cycle boundary with a resumable
    checkpoint, ``stopped.json`` and exit 75 (not the agent killing its workers: 143 / 138)."""
    import json
    import os
    import signal
    import subprocess
    import sys
    import time

    from balagg.train.deadline import EXIT_RESUMABLE
    from balagg.train.files import read_metrics

    workdir, manifest = tmp_path / "train", tmp_path / "manifest.json"
    command = [sys.executable, "-m", "balagg", "train", "--cell", str(two_process_cell),
               "--workdir", str(workdir), "--out", str(manifest)]
    # torchrun's agent gives ranks it terminates 30 s before SIGKILL; a GPU cycle takes minutes, a CPU one
    # about a second: with no grace at all the agent's own answer to a signal can never pass for a stop
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1", "TORCH_ELASTIC_SHUTDOWN_TIMEOUT": "0"}
    launcher = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, env=env)
    try:
        deadline = time.monotonic() + 300
        while len(read_metrics(workdir / "metrics.jsonl")) < 1:  # both ranks train, their handlers are set
            assert launcher.poll() is None, launcher.stderr.read()[-3000:]
            assert time.monotonic() < deadline, "no training step within 300 s"
            time.sleep(0.05)
        if target == "launcher":
            launcher.send_signal(signal.SIGUSR1)
        else:
            for pid in _tree(launcher.pid):
                os.kill(pid, signal.SIGTERM)
        _, err = launcher.communicate(timeout=300)
    finally:
        if launcher.poll() is None:
            launcher.kill()
    name = "SIGUSR1" if target == "launcher" else "SIGTERM"
    assert launcher.returncode == EXIT_RESUMABLE, err[-3000:]
    stopped = json.loads((workdir / "stopped.json").read_text())
    assert stopped["reason"] == f"signal {name}" and stopped["step"] % 2 == 0 and stopped["step"] < 40
    assert (workdir / "state" / f"checkpoint-{stopped['step']}").is_dir()
    assert [row["step"] for row in read_metrics(workdir / "metrics.jsonl")] == list(range(1, stopped["step"] + 1))
    assert not manifest.exists()
