"""One process of tests/test_fsdp2_accumulation.py: a cell trained by balagg's own train path
(:func:`balagg.train.run.run_cell`: ``grpo_config_kwargs``, the precision policy, AggregatedGRPOTrainer,
transformers' accumulation loop, accelerate's ``no_sync``) under FSDP2 on 2 CPU processes over gloo, in the
environment that ``accelerate launch --config_file configs/accelerate/fsdp2.yaml`` gives a GPU job
(tests/accelerate_launch.py).

accelerate enables FSDP only for accelerator backends (``AcceleratorState``: the FSDP branch is taken for
``MULTI_GPU`` and its kin, never for ``MULTI_CPU``), so this worker has the process state read as
``MULTI_GPU`` while the Accelerator is built; the device stays the CPU and the process group gloo, and
everything after (``fsdp2_prepare_model``, ``no_sync``, torch's FSDP2 hooks) is the libraries' own code.

A probe callback looks at torch's FSDP2 parameters (``FSDPParam``, torch
``distributed/fsdp/_fully_shard/_fsdp_param.py``) after every micro-batch that is not the last of its
optimiser step (``on_substep_end``): the bytes of unsharded gradients that survive it
(``unsharded_accumulated_grad``, the reduce-dtype copy that ``to_accumulated_grad_if_needed`` makes under
``set_requires_gradient_sync(False)``, and the unsharded parameter's own ``grad``) and of the sharded
gradients already reduced. Before each optimiser step it gathers the full gradient; after it, it counts
the bytes this rank holds of the sharded fp32 parameters, gradients and AdamW moments.

Two runs of the same cell, one after the other: ``sync`` (balagg's configuration) and ``no_sync``
(the same with ``gradient_accumulation_kwargs`` removed from TrainingArguments' ``accelerator_config``:
transformers then runs micro-batches 1..GA-1 under ``accelerator.no_sync``). Rank 0 writes
``result.json`` into the folder given as the first argument.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from transformers import TrainerCallback

GROUPS = 4  # prompts per rollout batch; with 4 responses each, 2 processes and micro-batches of 2: GA = 4


def fsdp_on_cpu() -> None:
    """Let accelerate build its FSDP state on the CPU (module docstring)."""
    from accelerate.state import AcceleratorState, PartialState
    from accelerate.utils import DistributedType

    original = AcceleratorState.__init__

    def init(self, *args, **kwargs):
        if PartialState._shared_state.get("distributed_type") == DistributedType.MULTI_CPU:
            PartialState._shared_state["distributed_type"] = DistributedType.MULTI_GPU
        original(self, *args, **kwargs)

    AcceleratorState.__init__ = init


def fsdp_params(model) -> list:
    """Every ``FSDPParam`` of the model's FSDP2 modules (each parameter group once)."""
    from torch.distributed.fsdp import FSDPModule

    params, seen = [], set()
    for module in model.modules():
        if isinstance(module, FSDPModule):
            for group in module._get_fsdp_state()._fsdp_param_groups:
                if id(group) not in seen:
                    seen.add(id(group))
                    params.extend(group.fsdp_params)
    return params


def storage_bytes(tensors) -> int:
    """Bytes of the distinct storages behind ``tensors`` (DTensors: their local shard)."""
    seen, total = set(), 0
    for tensor in tensors:
        if tensor is None:
            continue
        local = tensor.to_local() if hasattr(tensor, "to_local") else tensor
        storage = local.untyped_storage()
        if storage.data_ptr() not in seen:
            seen.add(storage.data_ptr())
            total += storage.nbytes()
    return total


class Probe(TrainerCallback):
    """What survives between micro-batches, the full gradient of each step and the state's bytes."""

    def __init__(self) -> None:
        self.trainer = None
        self.between: list[dict] = []
        self.gradients: list[torch.Tensor] = []
        self.state: dict | None = None

    def on_substep_end(self, args, state, control, **kwargs):
        params = fsdp_params(self.trainer.model)
        unsharded = sum(p.unsharded_accumulated_grad.numel() * p.unsharded_accumulated_grad.element_size()
                        for p in params if p.unsharded_accumulated_grad is not None)
        unsharded += sum(p._unsharded_param.grad.numel() * p._unsharded_param.grad.element_size()
                         for p in params if hasattr(p, "_unsharded_param") and p._unsharded_param.grad is not None)
        self.between.append({"step": state.global_step, "unsharded_grad_bytes": unsharded,
                             "sharded_grad_bytes": storage_bytes(p.sharded_param.grad for p in params)})

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        model = self.trainer.model
        self.gradients.append(torch.cat([p.grad.full_tensor().flatten() for p in model.parameters()]))

    def on_optimizer_step(self, args, state, control, **kwargs):
        model, optimizer = self.trainer.model, self.trainer.optimizer
        params = list(model.parameters())
        moments = [state[key] for state in (optimizer.state[p] for p in params) for key in ("exp_avg", "exp_avg_sq")]
        self.state = {
            "parameters": sum(p.numel() for p in params),  # the full (unsharded) count
            "weights": storage_bytes(params), "gradients": storage_bytes(p.grad for p in params),
            "moments": storage_bytes(moments),
            "dtypes": sorted({str(t.dtype) for t in [*params, *moments]}),
        }


def train(root: Path, mode: str, probe: Probe) -> dict:
    from balagg.train import config as train_config
    from balagg.train import run
    from balagg.train.config import CellConfig

    cell = CellConfig.from_dict({**json.loads((root / "cell.json").read_text())})
    original_kwargs, original_build = train_config.grpo_config_kwargs, run._build_trainer

    def kwargs_without_sync(cell, output_dir):
        kwargs = original_kwargs(cell, output_dir)
        kwargs.pop("accelerator_config", None)  # transformers' default: no_sync for micro-batches 1..GA-1
        return kwargs

    def build(*args, **kwargs):
        trainer, guard = original_build(*args, **kwargs)
        probe.trainer = trainer
        trainer.add_callback(probe)
        return trainer, guard

    run._build_trainer = build
    if mode == "no_sync":
        run.grpo_config_kwargs = kwargs_without_sync
    try:
        run.run_cell(cell, root / mode / "train", root / mode / "manifest.json")
    finally:
        run._build_trainer, run.grpo_config_kwargs = original_build, original_kwargs
    return {"between_micro_batches": probe.between, "state": probe.state,
            "gradient_accumulation_steps": probe.trainer.args.gradient_accumulation_steps,
            "sync_each_batch": bool(probe.trainer.accelerator.gradient_state.plugin_kwargs.get("sync_each_batch")),
            "distributed_type": str(probe.trainer.accelerator.distributed_type),
            "is_fsdp2": probe.trainer.accelerator.is_fsdp2}


def main(root: Path) -> None:
    torch.set_num_threads(1)
    fsdp_on_cpu()
    results, gradients = {}, {}
    for mode in ("sync", "no_sync"):
        probe = Probe()
        results[mode] = train(root, mode, probe)
        gradients[mode] = probe.gradients
    if int(os.environ["RANK"]) == 0:
        differences = [float((a - b).abs().max() / b.abs().max().clamp(min=1e-30))
                       for a, b in zip(gradients["sync"], gradients["no_sync"], strict=True)]
        results["max_relative_gradient_difference"] = max(differences)
        results["world_size"] = dist.get_world_size() if dist.is_initialized() else 1
        (root / "result.json").write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
