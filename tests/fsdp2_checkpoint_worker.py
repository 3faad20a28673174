"""One process of tests/test_fsdp2_checkpoints.py, run by torchrun on the CPU (gloo), in the environment that
``accelerate launch --config_file configs/accelerate/fsdp2.yaml`` gives a GPU job (tests/accelerate_launch.py).

accelerate runs FSDP only on accelerators, so this process calls accelerate's FSDP2 code itself, as the
Trainer does on GPUs: the plugin built from the environment with balagg's mixed-precision policy on it
(balagg.train.precision), ``fsdp2_prepare_model`` (sharding), one AdamW step under bf16 autocast, the
resumable state through ``save_fsdp_model`` / ``save_fsdp_optimizer`` (what ``Trainer._save_checkpoint``
calls under FSDP), the evaluation checkpoint from ``Accelerator.get_state_dict`` (FSDP2's gather) through
``balagg.train.eval_checkpoints.write_eval_checkpoint``, then a fresh model and optimiser loaded back with
``load_fsdp_model`` / ``load_fsdp_optimizer`` (the resume). Rank 0 writes ``result.json`` into the folder
given as the first argument.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from types import SimpleNamespace

import torch
import torch.distributed as dist


def build_model(seed: int):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    config = Qwen2Config(vocab_size=96, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, intermediate_size=64, max_position_embeddings=64,
                         tie_word_embeddings=False)  # Qwen2.5-Math-7B's LM head is its own
    return Qwen2ForCausalLM(config)


def main(out: Path, config_file: str) -> None:
    from accelerate import Accelerator, PartialState
    from accelerate.utils import DistributedType, FullyShardedDataParallelPlugin
    from accelerate.utils.fsdp_utils import (fsdp2_prepare_model, load_fsdp_model, load_fsdp_optimizer,
                                             save_fsdp_model, save_fsdp_optimizer)

    from balagg.tinyworld.model import build_tokenizer
    from balagg.train.eval_checkpoints import write_eval_checkpoint
    from balagg.train.precision import apply_policy

    state = PartialState(cpu=True)
    plugin = FullyShardedDataParallelPlugin()
    plugin.set_mixed_precision(os.environ["ACCELERATE_MIXED_PRECISION"])
    # the attributes of an Accelerator that accelerate's FSDP2 functions read
    accelerator = SimpleNamespace(state=SimpleNamespace(fsdp_plugin=plugin),
                                  mixed_precision=os.environ["ACCELERATE_MIXED_PRECISION"],
                                  is_main_process=state.is_main_process, device=state.device,
                                  process_index=state.process_index, num_processes=state.num_processes,
                                  distributed_type=DistributedType.FSDP, is_fsdp2=True,
                                  wait_for_everyone=state.wait_for_everyone)
    policy = apply_policy(accelerator, config_file)

    model = fsdp2_prepare_model(accelerator, build_model(seed=0))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    ids = torch.randint(0, 96, (2, 24), generator=torch.Generator().manual_seed(state.process_index))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()

    resumable = out / "state"
    save_fsdp_model(plugin, accelerator, model, str(resumable))
    save_fsdp_optimizer(plugin, accelerator, optimizer, model, str(resumable))
    masters = Accelerator.get_state_dict(accelerator, model)  # accelerate's FSDP2 gather onto rank 0
    if state.is_main_process:
        write_eval_checkpoint(model, masters, build_tokenizer(), out / "eval", torch.bfloat16)
    dist.barrier()

    restored = fsdp2_prepare_model(accelerator, build_model(seed=1))
    restored_optimizer = torch.optim.AdamW(restored.parameters(), lr=1e-2)
    load_fsdp_model(plugin, accelerator, restored, str(resumable))
    load_fsdp_optimizer(plugin, accelerator, restored_optimizer, restored, str(resumable))
    moments_equal = all(
        torch.equal(a["exp_avg"].to_local(), b["exp_avg"].to_local())
        and torch.equal(a["exp_avg_sq"].to_local(), b["exp_avg_sq"].to_local())
        for a, b in zip((optimizer.state[p] for p in model.parameters()),
                        (restored_optimizer.state[p] for p in restored.parameters()), strict=True))
    flags = torch.tensor([float(moments_equal)])
    dist.all_reduce(flags, op=dist.ReduceOp.MIN)
    reloaded = Accelerator.get_state_dict(accelerator, restored)
    if state.is_main_process:
        from transformers import AutoModelForCausalLM

        evaluated = AutoModelForCausalLM.from_pretrained(out / "eval", dtype="auto").state_dict()
        result = {
            "world_size": state.num_processes,
            "state_dict_type": str(plugin.state_dict_type),
            "policy": policy,
            "parameters": sum(value.numel() for value in masters.values()),
            "tensors": len(masters),
            "master_dtypes": sorted({str(value.dtype) for value in masters.values()}),
            "resumed_weights_equal": all(torch.equal(reloaded[k], masters[k]) for k in masters),
            "resumed_moments_equal": bool(flags.item()),
            "eval_equals_masters_in_bf16": all(torch.equal(evaluated[k], masters[k].to(torch.bfloat16))
                                               for k in masters),
        }
        (out / "result.json").write_text(json.dumps(result, indent=2))
    dist.barrier()


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2])
