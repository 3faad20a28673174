"""An accumulated optimiser step of a paper model under FSDP2, with the rollout engine resident: peak memory
per GPU, against the figure of balagg.train.memory (what ``balagg plan`` prints). bench/gpu_smoke.py runs it
(step ``microbatch-fsdp2``) through the paper's launcher:

    accelerate launch --config_file configs/accelerate/fsdp2.yaml --num_processes N \\
        bench/fsdp_microbatch.py --out FILE [--model qwen2.5-math-7b] [--accumulation 2] [--no-sync] [--quick]

Every process (one per GPU) does to its GPU what a train job of configs/paper.yaml does:

1. the rollout engine, resident (a GPU and vLLM importable): an ``LLM`` built as TRL's colocate mode builds
   it (``distributed_executor_backend="external_launcher"``, ``max_model_len`` = prompt + completion,
   ``max_num_batched_tokens=4096``), from the model's shape with dummy weights, sized to hold the bytes that
   the model's ``vllm_gpu_memory_utilization`` gives it on an 80 GiB GPU (the paper's H100s), whatever this
   GPU's size;
2. the policy: the model's shape in fp32 with TRL's fused LM head (``add_fused_lm_head``: log-probs and
   entropies in tiles, no full logits) and gradient checkpointing, sharded by accelerate's own
   ``fsdp2_prepare_model`` with the FSDP plugin that ``accelerate launch`` built from fsdp2.yaml and balagg's
   mixed-precision policy on it (bf16 compute, fp32 reduce; balagg.train.precision);
3. two accumulated optimiser steps of ``--accumulation`` micro-batches each (default 2), every row real
   tokens, one row left-padded (so transformers builds the 4-D attention mask, as for a real micro-batch):
   the first micro-batch of a step half the completion width, the next ones the widest a step can hold,
   ``micro_batch_size`` x (``max_prompt_length`` + ``max_completion_length``) (2 x 10,240 for the paper's
   7B). The forward under bf16 autocast scores the completion columns (as TRL's
   ``_get_per_token_logps_and_entropies``), then a policy-gradient loss and its backward, which
   reduce-scatters every micro-batch (balagg's ``sync_each_batch``; ``--no-sync`` holds the gradients
   unsharded until the step's last micro-batch, transformers' default), then AdamW's step. The first step
   allocates the optimiser's moments; the peak is measured over the second, where the widest micro-batch
   meets the sharded state, its gradients and the moments. A world smaller than the model's train GPUs holds
   a larger share of the state per GPU than the paper's nodes do: the AdamW step is left out where the whole
   state would not fit beside the engine (one GPU for the 7B);
4. memory: ``torch.cuda.max_memory_allocated`` and ``max_memory_reserved`` over the second step (the engine
   included), the device's used memory, and the same figure from balagg.train.memory for this world, this
   width and what was allocated (the engine's measured bytes; the moments if stepped): ``plan_low_by`` is
   how much the model's allocation falls short of the measured peak (bench/gpu_smoke.sh fails above 10 %).
   The plan's own figure for the paper's node (``balagg plan``, CUDA context and NCCL included) is recorded
   beside it.

``--quick``: tiny shapes and ``micro_batch_size`` (the 7B's, 2) x (16 + 48) tokens, on the CPU over gloo when there is no GPU (no engine);
the peak resident set replaces the CUDA figures. It proves the code path, not the figures.
Rank 0 writes the JSON to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import torch
import torch.distributed as dist

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
from gpu_smoke import DRY_LENGTHS, SHAPES, qwen2_config  # noqa: E402  (bench/ is this script's folder)

PAPER = REPO / "configs" / "paper.yaml"
FSDP2 = REPO / "configs" / "accelerate" / "fsdp2.yaml"
PAPER_GPU_GIB = 80  # the paper grid's H100 80 GB
GIB = 2**30
STATE_BYTES_PER_PARAMETER = 16  # fp32 weights 4 + fp32 gradients 4 + AdamW's two fp32 moments 8


def paper_settings(model: str) -> dict:
    """The train settings of ``model`` in configs/paper.yaml (the train section with the model's overrides,
    as the workflow resolves them) and its train GPU count."""
    import yaml

    paper = yaml.safe_load(PAPER.read_text())
    spec = paper["models"][model]
    return {**paper["train"], **spec.get("train", {}), "train_gpus": spec["train_resources"]["gpus"]}


def stand_in_accelerator(state, plugin, mixed_precision: str):
    """The attributes of an Accelerator that accelerate's FSDP2 functions read (``fsdp2_prepare_model``,
    ``get_state_dict``): accelerate runs FSDP only on accelerators, and this stands in for it on both."""
    from accelerate.utils import DistributedType

    return SimpleNamespace(state=SimpleNamespace(fsdp_plugin=plugin), mixed_precision=mixed_precision,
                           is_main_process=state.is_main_process, device=state.device,
                           process_index=state.process_index, num_processes=state.num_processes,
                           local_process_index=state.local_process_index, distributed_type=DistributedType.FSDP,
                           is_fsdp2=True, wait_for_everyone=state.wait_for_everyone)


def start_engine(shape: str, tokenizer, length: int, utilization: float, seed: int) -> dict:
    """The colocated rollout engine (TRL's colocate arguments), dummy weights of ``shape``; what it holds."""
    from vllm import LLM

    folder = Path(tempfile.mkdtemp(prefix="engine-model-"))
    config = qwen2_config(shape, tokenizer, max(length, 4096))
    config.tie_word_embeddings = False
    config.dtype = "bfloat16"
    config.save_pretrained(folder)
    total = torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory
    share = min(0.95, utilization * PAPER_GPU_GIB * GIB / total)
    before = torch.cuda.memory_allocated()
    llm = LLM(model=str(folder), load_format="dummy", skip_tokenizer_init=True, tensor_parallel_size=1,
              gpu_memory_utilization=share, max_model_len=length, max_num_batched_tokens=4096,
              distributed_executor_backend="external_launcher", seed=seed, logprobs_mode="processed_logprobs")
    return {"llm": llm, "utilization_of_80gib": utilization, "utilization_here": round(share, 4),
            "allocated_gib": round((torch.cuda.memory_allocated() - before) / GIB, 2)}


def micro_batch(model, rows: int, prompt: int, completion: int, vocab: int, device, seed: int) -> tuple[torch.Tensor, int]:
    """Forward (completion columns scored through the fused LM head) and backward of one micro-batch of real
    tokens, its first row left-padded by a few tokens; the loss and the number of tokens."""
    generator = torch.Generator(device="cpu").manual_seed(seed)
    ids = torch.randint(0, vocab, (rows, prompt + completion), generator=generator).to(device)
    mask = torch.ones_like(ids)
    mask[0, :min(8, prompt - 1)] = 0  # a left-padded prompt: transformers then builds the 4-D attention mask
    labels = ids.masked_fill(mask == 0, -100)
    labels[:, :-completion] = -100  # TRL scores the completion tokens only
    with torch.autocast(device_type=device.type, dtype=torch.bfloat16):
        outputs = model(input_ids=ids, attention_mask=mask, labels=labels, fused_lm_head=True)
    logps = outputs.log_probs[:, -completion:]
    advantages = torch.linspace(-1.0, 1.0, rows, device=device)[:, None]
    ratio = torch.exp(logps - logps.detach())  # one PPO iteration: old = current log-probs
    loss = -(ratio * advantages).sum() / (rows * completion)
    loss.backward()
    return loss.detach(), ids.numel()


def accumulated_step(model, optimizer, widths: list[int], rows: int, prompt: int, vocab: int, device, seed: int,
                     sync_each_batch: bool) -> tuple[list[float], int]:
    """One optimiser step over micro-batches of the given completion widths; losses and tokens."""
    losses, tokens = [], 0
    for index, completion in enumerate(widths):
        last = index == len(widths) - 1
        if not sync_each_batch:
            model.set_requires_gradient_sync(last)  # accelerate's no_sync under FSDP2
        loss, count = micro_batch(model, rows, prompt, completion, vocab, device, seed + index)
        losses.append(float(loss))
        tokens += count
    model.set_requires_gradient_sync(True)
    if optimizer is not None:
        optimizer.step()
    model.zero_grad(set_to_none=True)  # as transformers' loop after every optimiser step
    return losses, tokens


def model_shape(config):
    """The :class:`~balagg.train.memory.ModelShape` of the built Qwen2 config (biased q, k, v projections)."""
    from balagg.train.memory import ModelShape

    return ModelShape(config.hidden_size, config.num_hidden_layers, config.intermediate_size, config.vocab_size,
                      config.num_attention_heads, config.num_key_value_heads,
                      tie_word_embeddings=config.tie_word_embeddings, attention_bias=True)


def predicted_allocation(shape, world: int, rows: int, prompt: int, completion: int, optimizer_step: bool,
                         sync_each_batch: bool) -> dict:
    """balagg.train.memory's allocation for what this run holds (the engine apart): the state terms of this
    world (the moments only if the optimiser stepped), the gradients kept under --no-sync, and the largest
    phase; CUDA context, NCCL buffers and the allocator's slack are not allocations."""
    from balagg.train.memory import GIB, train_memory

    memory = train_memory(shape, gpus=world, gpu_memory_gb=80, micro_batch_size=rows, prompt_tokens=prompt,
                          completion_tokens=completion, bf16=True, reduce_bytes=4, sharded=True, engine_share=None,
                          sync_each_batch=sync_each_batch)
    state = sum(term.bytes for term in memory.persistent
                if not term.name.startswith(("CUDA", "NCCL", "engine")) and (optimizer_step or "AdamW" not in term.name))
    phases = {name: memory.phase_bytes(name) for name in memory.phases if optimizer_step or name != "optimiser step"}
    peak = max(phases, key=phases.get)
    return {"state_gib": round(state / GIB, 2), "peak_phase": peak, "phase_gib": round(phases[peak] / GIB, 2),
            "allocated_gib": round((state + phases[peak]) / GIB, 2)}


def paper_plan(model: str) -> dict | None:
    """What ``balagg plan`` prints for the model's train job on the paper's node (None where it cannot)."""
    try:
        from balagg.campaign import load
        from balagg.grid import Grid
        from balagg.plan import model_figures
        from balagg.train.memory import GIB

        memory = model_figures(Grid(load([str(PAPER)])), model).train_memory
    except Exception as error:  # the schema or the config cannot be read here: recorded, not fatal
        return {"error": str(error)[-300:]}
    return {"peak_gib": round(memory.peak / GIB, 2), "free_share": round(memory.free_share, 4),
            "phase": memory.peak_phase}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="JSON figures (written by rank 0)")
    parser.add_argument("--model", default="qwen2.5-math-7b", help="a model of configs/paper.yaml (its train settings)")
    parser.add_argument("--accumulation", type=int, default=2, help="micro-batches per optimiser step (>= 2)")
    parser.add_argument("--no-sync", action="store_true",
                        help="hold gradients unsharded until a step's last micro-batch (transformers' default)")
    parser.add_argument("--quick", action="store_true", help="tiny shapes (CPU over gloo when there is no GPU)")
    args = parser.parse_args(argv)
    if args.accumulation < 2:
        parser.error("--accumulation must be at least 2: the widest micro-batch comes after the first")

    from accelerate import PartialState
    from accelerate.utils import FullyShardedDataParallelPlugin
    from accelerate.utils.fsdp_utils import fsdp2_prepare_model
    from transformers import Qwen2ForCausalLM
    from trl.trainer.utils import add_fused_lm_head

    from balagg.tinyworld.model import build_tokenizer
    from balagg.train.precision import apply_policy

    gpu = torch.cuda.is_available()
    state = PartialState(cpu=not gpu)  # the process group (nccl on GPUs, gloo on the CPU)
    device = state.device
    rank, world = state.process_index, state.num_processes
    settings = paper_settings(args.model)
    shape = "dry-7b" if args.quick else args.model
    prompt, completion = DRY_LENGTHS if args.quick else (settings["max_prompt_length"],
                                                         settings["max_completion_length"])
    rows = settings["micro_batch_size"]
    widths = [completion // 2] + [completion] * (args.accumulation - 1)  # the widest after the first
    sync_each_batch = not args.no_sync
    tokenizer = build_tokenizer()
    figures: dict = {"model": args.model, "shape": shape, "quick": args.quick, "processes": world,
                     "device": torch.cuda.get_device_name() if gpu else "cpu",
                     "micro_batch": f"{rows} x ({prompt} + {completion}) tokens",
                     "accumulation": {"micro_batches": args.accumulation, "completion_widths": widths,
                                      "sync_each_batch": sync_each_batch},
                     "allocator": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")}

    engine = None
    if gpu and not args.quick:
        try:
            import vllm  # noqa: F401
        except ImportError:
            figures["engine"] = "not resident: vllm is not importable"
        else:
            engine = start_engine(shape, tokenizer, prompt + completion, settings["vllm_gpu_memory_utilization"],
                                  seed=rank)
            figures["engine"] = {k: v for k, v in engine.items() if k != "llm"}
    else:
        figures["engine"] = "not resident: " + ("--quick" if gpu else "no GPU (TRL's colocated vLLM needs one)")

    plugin = FullyShardedDataParallelPlugin()  # from the environment accelerate launch set from fsdp2.yaml
    plugin.set_mixed_precision(os.environ.get("ACCELERATE_MIXED_PRECISION", "bf16"))
    accelerator = stand_in_accelerator(state, plugin, os.environ.get("ACCELERATE_MIXED_PRECISION", "bf16"))
    figures["policy"] = apply_policy(accelerator, str(FSDP2))
    figures["fsdp"] = {"version": plugin.fsdp_version, "reshard_after_forward": plugin.reshard_after_forward,
                       "state_dict_type": str(plugin.state_dict_type).rsplit(".", 1)[-1]}

    config = qwen2_config(shape, tokenizer, max(prompt + completion, 4096))
    config.tie_word_embeddings = False  # Qwen2.5-Math-7B's LM head is its own
    config.use_cache = False
    torch.manual_seed(0)
    # the full model exists on rank 0 only, as with fsdp_cpu_ram_efficient_loading (built on its device, which
    # is faster than the host; accelerate broadcasts it into the shards); the others hold only shapes and the
    # buffers computed from the config (the rotary frequencies), which accelerate keeps
    with torch.device(device if state.is_main_process else "meta"):
        model = Qwen2ForCausalLM(config)
    if not state.is_main_process:
        model.model.rotary_emb = type(model.model.rotary_emb)(config=config, device="cpu")
    parameters = sum(p.numel() for p in model.parameters())
    add_fused_lm_head(model, temperature=settings.get("temperature", 1.0), outputs=("log_probs", "entropy"))
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model = fsdp2_prepare_model(accelerator, model)
    model.train()
    # gradients and moments (12 B per parameter over this world) must fit beside the engine and the weights
    rest_of_state = (STATE_BYTES_PER_PARAMETER - 4) * parameters / world
    free = (torch.cuda.get_device_properties(device).total_memory - torch.cuda.memory_allocated()
            if gpu else float("inf"))
    optimizer_step = args.quick or world >= settings["train_gpus"] or rest_of_state < 0.6 * free
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6) if optimizer_step else None

    # the first step allocates the moments; the second is measured
    accumulated_step(model, optimizer, widths, rows, prompt, config.vocab_size, device, 1000 * rank, sync_each_batch)
    if gpu:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
    start = time.perf_counter()
    losses, tokens = accumulated_step(model, optimizer, widths, rows, prompt, config.vocab_size, device,
                                      1000 * rank + 100, sync_each_batch)
    if gpu:
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start

    mine = {"losses": losses, "seconds": seconds,
            "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
    if gpu:
        free, total = torch.cuda.mem_get_info()
        mine |= {"peak_allocated": torch.cuda.max_memory_allocated(), "peak_reserved": torch.cuda.max_memory_reserved(),
                 "device_used": total - free, "total": total, "before_step": before}
    ranks: list = [None] * world
    dist.all_gather_object(ranks, mine)
    predicted = predicted_allocation(model_shape(config), world, rows, prompt, completion, optimizer_step,
                                     sync_each_batch)
    figures |= {"parameters": parameters, "tokens_per_step": tokens, "optimizer_step": optimizer_step,
                "seconds": round(max(r["seconds"] for r in ranks), 3),
                "tokens_per_s_per_gpu": round(tokens / max(r["seconds"] for r in ranks), 1),
                "loss_finite": all(loss == loss for r in ranks for loss in r["losses"]),
                "peak_rss_mib": round(max(r["peak_rss_mib"] for r in ranks), 1),
                "predicted": predicted, "plan_on_the_paper_node": paper_plan(args.model)}
    if gpu:
        peak = max(r["peak_allocated"] for r in ranks)
        engine_bytes = engine["allocated_gib"] * GIB if engine else 0
        expected = predicted["allocated_gib"] * GIB + engine_bytes
        figures |= {"peak_allocated_gib": round(peak / GIB, 2),
                    "peak_reserved_gib": round(max(r["peak_reserved"] for r in ranks) / GIB, 2),
                    "device_used_gib": round(max(r["device_used"] for r in ranks) / GIB, 2),
                    "device_total_gib": round(ranks[0]["total"] / GIB, 2),
                    "allocated_before_step_gib": round(max(r["before_step"] for r in ranks) / GIB, 2),
                    "expected_allocated_gib": round(expected / GIB, 2),
                    "plan_low_by": round((peak - expected) / peak, 4)}
    else:
        figures["plan_low_by"] = None  # the CPU gives no allocator peak to compare
    if state.is_main_process:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(figures, indent=2, sort_keys=True) + "\n")
    state.wait_for_everyone()
    if dist.is_initialized():
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
