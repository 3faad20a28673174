"""What a launched training really runs, against what its accelerate config asked for (issue 10: accelerate
runs an FSDP config as plain DDP on CPU without saying so; the manifest must say it)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")
from accelerate.utils import DistributedType  # noqa: E402

from balagg.train.launch import accelerate_packages, distributed_report  # noqa: E402

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
