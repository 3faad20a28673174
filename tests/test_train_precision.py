"""The FSDP2 mixed-precision policy a GPU train job shards with, built without a GPU: the FSDP plugin that
``accelerate launch --config_file configs/accelerate/fsdp2.yaml`` gives every process (accelerate's own
launcher code turns the file into the processes' environment), then balagg's policy on it."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from accelerate_launch import launch_env
from accelerate_launch import launched_plugin as plugin_from_environment
from balagg.train.precision import apply_policy, policy_settings

REPO = Path(__file__).resolve().parents[1]
FSDP2 = REPO / "configs" / "accelerate" / "fsdp2.yaml"


def launched_plugin(config_file: Path, monkeypatch):
    """The FullyShardedDataParallelPlugin of a process that `accelerate launch --config_file config_file`
    started on 8 GPUs."""
    for key, value in launch_env(config_file).items():
        monkeypatch.setenv(key, value)
    return plugin_from_environment()


def test_the_fsdp2_config_reduces_gradients_in_fp32_and_computes_in_bf16(monkeypatch):
    plugin = launched_plugin(FSDP2, monkeypatch)
    assert plugin.fsdp_version == 2
    # accelerate alone derives both dtypes from mixed_precision: bf16 reduce-scatter
    assert plugin.mixed_precision_policy.reduce_dtype == torch.bfloat16
    recorded = apply_policy(SimpleNamespace(state=SimpleNamespace(fsdp_plugin=plugin)), str(FSDP2))
    policy = plugin.mixed_precision_policy
    assert (policy.param_dtype, policy.reduce_dtype) == (torch.bfloat16, torch.float32)
    assert recorded == {"param_dtype": "bfloat16", "reduce_dtype": "float32", "output_dtype": None,
                        "cast_forward_inputs": True}


def test_without_fsdp_no_policy_is_recorded():
    """DDP, or accelerate's CPU fallback of an FSDP config: fp32 parameters, fp32 gradients, nothing to record."""
    assert apply_policy(SimpleNamespace(state=SimpleNamespace()), str(FSDP2)) is None
    assert policy_settings(REPO / "configs" / "accelerate" / "ddp.yaml") is None


@pytest.mark.parametrize("policy, problem", [
    ("{param_dtype: bf16, reduce_dtype: fp64}", "unknown dtypes"),
    ("{param_dtype: fp32, reduce_dtype: fp32}", "differs from mixed_precision bf16"),
    ("{reduce_dtype: fp32}", "must map exactly param_dtype and reduce_dtype"),
])
def test_a_bad_policy_is_one_line_naming_the_file(tmp_path, policy, problem):
    text = FSDP2.read_text()
    assert "fsdp_mixed_precision_policy:" in text
    lines = [f"  fsdp_mixed_precision_policy: {policy}" if line.strip().startswith("fsdp_mixed_precision_policy:")
             else line for line in text.splitlines()]
    config = tmp_path / "bad.yaml"
    config.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError) as caught:
        policy_settings(config)
    message = str(caught.value)
    assert str(config) in message and problem in message and "\n" not in message
