"""One full-width training micro-batch of a paper model under FSDP2, with the rollout engine resident: peak
memory per GPU. bench/gpu_smoke.py runs it (step ``microbatch-fsdp2``) through the paper's launcher:

    accelerate launch --config_file configs/accelerate/fsdp2.yaml --num_processes N \\
        bench/fsdp_microbatch.py --out FILE [--model qwen2.5-math-7b] [--quick]

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
3. one micro-batch of ``micro_batch_size`` x (``max_prompt_length`` + ``max_completion_length``) tokens (4 x
   10,240 for the paper), all real: the forward under bf16 autocast scores the completion columns (as TRL's
   ``_get_per_token_logps_and_entropies``), a policy-gradient loss, the backward, and an AdamW step that
   allocates the optimiser's moments. A world smaller than the model's train GPUs holds a larger share of
   the state per GPU than the paper's nodes do; the step is left out there when the whole state would not
   fit beside the engine (one GPU for the 7B), and its share on the paper's node is computed instead;
4. memory: ``torch.cuda.max_memory_allocated`` and ``max_memory_reserved`` over the micro-batch (the engine
   included), the device's used memory, the engine's and the sharded state's allocations, and the peak a
   GPU of the paper's node would see (measured, or the measured transient plus the computed state share).

``--quick``: tiny shapes and 4 x (16 + 48) tokens, on the CPU over gloo when there is no GPU (no engine);
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


def micro_batch(model, batch: int, prompt: int, completion: int, vocab: int, device) -> tuple[torch.Tensor, int]:
    """Forward (completion columns scored through the fused LM head) and backward of one micro-batch with
    every token real; the loss and the number of tokens."""
    generator = torch.Generator(device="cpu").manual_seed(dist.get_rank())
    ids = torch.randint(0, vocab, (batch, prompt + completion), generator=generator).to(device)
    mask = torch.ones_like(ids)
    labels = ids.masked_fill(mask == 0, -100)
    labels[:, :-completion] = -100  # TRL scores the completion tokens only
    with torch.autocast(device_type=device.type, dtype=torch.bfloat16):
        outputs = model(input_ids=ids, attention_mask=mask, labels=labels, fused_lm_head=True)
    logps = outputs.log_probs[:, -completion:]
    advantages = torch.linspace(-1.0, 1.0, batch, device=device)[:, None]
    ratio = torch.exp(logps - logps.detach())  # one PPO iteration: old = current log-probs
    loss = -(ratio * advantages).sum() / (batch * completion)
    loss.backward()
    return loss.detach(), ids.numel()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="JSON figures (written by rank 0)")
    parser.add_argument("--model", default="qwen2.5-math-7b", help="a model of configs/paper.yaml (its train settings)")
    parser.add_argument("--quick", action="store_true", help="tiny shapes (CPU over gloo when there is no GPU)")
    args = parser.parse_args(argv)

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
    batch = settings["micro_batch_size"]
    tokenizer = build_tokenizer()
    figures: dict = {"model": args.model, "shape": shape, "quick": args.quick, "processes": world,
                     "device": torch.cuda.get_device_name() if gpu else "cpu",
                     "micro_batch": f"{batch} x ({prompt} + {completion}) tokens",
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
    if gpu:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        sharded = torch.cuda.memory_allocated()

    start = time.perf_counter()
    loss, tokens = micro_batch(model, batch, prompt, completion, config.vocab_size, device)
    if optimizer is not None:
        optimizer.step()
        optimizer.zero_grad(set_to_none=False)  # FSDP2 keeps the gradients' memory between steps
    if gpu:
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start

    mine = {"loss": float(loss), "seconds": seconds,
            "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
    if gpu:
        free, total = torch.cuda.mem_get_info()
        mine |= {"peak_allocated": torch.cuda.max_memory_allocated(), "peak_reserved": torch.cuda.max_memory_reserved(),
                 "device_used": total - free, "total": total, "before_micro_batch": sharded}
    ranks: list = [None] * world
    dist.all_gather_object(ranks, mine)
    figures |= {"parameters": parameters, "tokens_per_micro_batch": tokens, "optimizer_step": optimizer_step,
                "seconds": round(max(r["seconds"] for r in ranks), 3),
                "tokens_per_s_per_gpu": round(tokens / max(r["seconds"] for r in ranks), 1),
                "loss_finite": all(r["loss"] == r["loss"] for r in ranks),
                "peak_rss_mib": round(max(r["peak_rss_mib"] for r in ranks), 1)}
    if gpu:
        peak = max(r["peak_allocated"] for r in ranks)
        before = max(r["before_micro_batch"] for r in ranks)
        engine_bytes = engine["allocated_gib"] * GIB if engine else 0
        transient = peak - before  # activations, gathered layers, gradients' buffers (and moments, if stepped)
        paper_gpus = settings["train_gpus"]
        at_paper = (peak if world == paper_gpus and optimizer_step else
                    engine_bytes + STATE_BYTES_PER_PARAMETER * parameters / paper_gpus + transient)
        figures |= {"peak_allocated_gib": round(peak / GIB, 2),
                    "peak_reserved_gib": round(max(r["peak_reserved"] for r in ranks) / GIB, 2),
                    "device_used_gib": round(max(r["device_used"] for r in ranks) / GIB, 2),
                    "device_total_gib": round(ranks[0]["total"] / GIB, 2),
                    "allocated_before_micro_batch_gib": round(before / GIB, 2),
                    "micro_batch_transient_gib": round(transient / GIB, 2),
                    "paper_gpus": paper_gpus,
                    "peak_per_gpu_on_the_paper_node_gib": round(at_paper / GIB, 2),
                    "peak_on_the_paper_node_is": "measured" if world == paper_gpus and optimizer_step else
                    (f"engine + {STATE_BYTES_PER_PARAMETER} B x parameters / {paper_gpus} GPUs + the measured "
                     "micro-batch transient (this world differs from the paper's)")}
    if state.is_main_process:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(figures, indent=2, sort_keys=True) + "\n")
    state.wait_for_everyone()
    if dist.is_initialized():
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
