"""The FSDP2 config's checkpoints on 2 CPU processes (tests/fsdp2_checkpoint_worker.py runs accelerate's own
FSDP2 code over gloo in the environment that `accelerate launch` gives a GPU job of
configs/accelerate/fsdp2.yaml): the resumable state is written by every rank, its own shard of the fp32
weights and of AdamW's two moments (12 bytes per parameter in all, no full copy on rank 0), and resumes
exactly; the evaluation checkpoint is the gathered fp32 master weights in bf16 (2 bytes per parameter)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from accelerate_launch import launch_env

REPO = Path(__file__).resolve().parents[1]
FSDP2 = REPO / "configs" / "accelerate" / "fsdp2.yaml"
PROCESSES = 2
DCP_FRAMING = 2048
"""Upper bound of torch.distributed.checkpoint's bytes per tensor and rank beyond the tensor's own (measured
about 1.4-1.6 kB)."""


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("fsdp2")
    env = {**os.environ, **launch_env(FSDP2, PROCESSES), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1",
           "PYTHONPATH": os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
                             str(PROCESSES), str(REPO / "tests" / "fsdp2_checkpoint_worker.py"), str(out), str(FSDP2)],
                            env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    return out, json.loads((out / "result.json").read_text())


@pytest.mark.slow
def test_resumable_state_is_each_ranks_own_shard_and_resumes_exactly(run):
    out, result = run
    assert result["world_size"] == PROCESSES and result["state_dict_type"] == "StateDictType.SHARDED_STATE_DICT"
    state = out / "state"
    assert not (state / "pytorch_model_fsdp.bin").exists() and not list(state.glob("*.safetensors"))
    for folder in ("pytorch_model_fsdp_0", "optimizer_0"):
        shards = sorted(p.name for p in (state / folder).glob("*.distcp"))
        assert shards == [f"__{rank}_0.distcp" for rank in range(PROCESSES)], folder
    sizes = [(state / "pytorch_model_fsdp_0" / f"__{rank}_0.distcp").stat().st_size for rank in range(PROCESSES)]
    assert max(sizes) < 1.5 * min(sizes)  # the weights are split, not held by one rank
    parameters, tensors = result["parameters"], result["tensors"]
    written = sum(p.stat().st_size for p in state.rglob("*.distcp"))
    # fp32 weights (4 B) + AdamW's exp_avg and exp_avg_sq (8 B) per parameter; per rank and tensor the
    # weight, the two moments and the step counter are framed
    assert 12 * parameters <= written <= 12 * parameters + DCP_FRAMING * 4 * tensors * PROCESSES
    assert result["master_dtypes"] == ["torch.float32"]
    assert result["resumed_weights_equal"] and result["resumed_moments_equal"]
    assert result["policy"]["reduce_dtype"] == "float32"


@pytest.mark.slow
def test_eval_checkpoint_is_the_gathered_master_weights_in_bf16(run):
    out, result = run
    assert result["eval_equals_masters_in_bf16"]
    weights = (out / "eval" / "model.safetensors").stat().st_size
    assert 2 * result["parameters"] <= weights <= 2 * result["parameters"] + 64 * 1024  # + the safetensors header
    assert json.loads((out / "eval" / "config.json").read_text())["dtype"] == "bfloat16"
