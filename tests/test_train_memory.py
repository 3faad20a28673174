"""GPU memory settings of the paper grid's train jobs: PyTorch's expandable segments for GPU train jobs (not for
CPU ones), an engine share per model, and a collective timeout that outlasts an evaluation checkpoint's write.
The measurement itself is bench/gpu_smoke.sh's microbatch-fsdp2 step (tests/test_gpu_smoke.py runs its CPU form)."""

from __future__ import annotations

import pytest
import yaml

from checkout import REPO
from test_workflow import snakemake, workdir  # noqa: F401  (workdir: a fixture)


def train_jobs(printed: str) -> list[str]:
    return [job for job in printed.split("\n\n") if "rule train:" in job]


@pytest.mark.slow
def test_gpu_train_jobs_use_expandable_segments_and_cpu_jobs_do_not(workdir):  # noqa: F811
    jobs = train_jobs(snakemake("-n", "-p", "--configfile", "configs/paper.yaml", cwd=workdir).stdout)
    assert len(jobs) == 12
    assert all("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python -m balagg train --cell" in job
               for job in jobs)
    cpu_jobs = train_jobs(snakemake("-n", "-p", cwd=workdir).stdout)  # the tiny world's CPU grid
    assert cpu_jobs and not any("PYTORCH_CUDA_ALLOC_CONF" in job for job in cpu_jobs)


def paper_train_settings() -> dict[str, dict]:
    """Each paper model's train settings as the workflow resolves them (train section, then the model's own)."""
    from balagg.campaign import load
    from balagg.grid import Grid

    grid = Grid(load([REPO / "configs" / "paper.yaml"]))
    return {name: grid.train_settings(name) for name in grid.models}


def test_each_paper_model_sizes_its_own_engine_share():
    """The engine's share is held for the whole run (sleep mode off), beside a training footprint that
    differs per model (a 7B on 8 GPUs, a 1.7B on 4): each model states its own."""
    paper = yaml.safe_load((REPO / "configs" / "paper.yaml").read_text())
    assert "vllm_gpu_memory_utilization" not in paper["train"]
    shares = {name: spec["train"]["vllm_gpu_memory_utilization"] for name, spec in paper["models"].items()}
    assert len(set(shares.values())) == len(shares) and all(0 < share < 1 for share in shares.values())


def test_paper_collective_timeout_outlasts_a_slow_evaluation_checkpoint_write():
    """Ranks wait in a collective while rank 0 writes a bf16 evaluation checkpoint: 2 bytes per parameter of
    Qwen2.5-Math-7B at 50 MB/s (a loaded shared file system) must fit in the timeout."""
    shapes = paper_shapes()
    for name, settings in paper_train_settings().items():
        parameters = shapes[name].parameters
        write_minutes = 2 * parameters / 50e6 / 60
        assert settings["collective_timeout_minutes"] > 2 * write_minutes, name


# ---- the memory model's terms against the libraries (balagg.train.memory)

def paper_shapes() -> dict:
    from balagg.config_schema import from_mapping
    from balagg.train.memory import ModelShape

    paper = yaml.safe_load((REPO / "configs" / "paper.yaml").read_text())
    return {name: from_mapping(ModelShape, spec["shape"], f"plan.models.{name}.shape")
            for name, spec in paper["plan"]["models"].items()}


def test_shapes_count_the_parameters_transformers_builds():
    """Each paper model's shape, built by transformers on the meta device: the parameter count (and so the
    state terms, 16 B per parameter over the GPUs) is the shape's."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM

    builders = {"qwen2.5-math-7b": (Qwen2Config, Qwen2ForCausalLM), "qwen3-1.7b": (Qwen3Config, Qwen3ForCausalLM)}
    for name, shape in paper_shapes().items():
        config_class, model_class = builders[name]
        fields = {k: v for k, v in vars(shape).items() if k not in ("attention_bias", "qk_norm") and v is not None}
        with torch.device("meta"):
            model = model_class(config_class(**fields))
        assert sum(p.numel() for p in model.parameters()) == shape.parameters, name
        root = sum(p.numel() for n, p in model.named_parameters() if not n.startswith("model.layers."))
        assert root == shape.root_parameters, name
        assert sum(p.numel() for p in model.model.layers[0].parameters()) == shape.layer_parameters, name


@pytest.mark.parametrize("family", ["qwen2", "qwen3"])
def test_a_layers_saved_activations_are_what_autograd_keeps(family):
    """One decoder layer's forward under bf16 autocast with a padding mask, as a recompute runs it: the bytes
    of the tensors autograd saves for its backward (its input and parameters aside) are
    layer_saved_bytes_per_token x tokens, counted with torch's saved-tensor hooks."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM
    from transformers.masking_utils import create_causal_mask

    from balagg.train.memory import ModelShape, layer_saved_bytes_per_token

    common = dict(hidden_size=128, intermediate_size=352, num_attention_heads=4, num_key_value_heads=2,
                  num_hidden_layers=1, vocab_size=64, attn_implementation="sdpa")
    torch.manual_seed(0)
    if family == "qwen2":
        config = Qwen2Config(**common)
        model, shape = Qwen2ForCausalLM(config), ModelShape(128, 1, 352, 64, 4, 2, attention_bias=True)
    else:
        config = Qwen3Config(**common, head_dim=48)
        model, shape = Qwen3ForCausalLM(config), ModelShape(128, 1, 352, 64, 4, 2, head_dim=48, qk_norm=True)
    model = model.to(torch.bfloat16)
    rows, length = 2, 96
    ids = torch.randint(0, 64, (rows, length))
    padding = torch.ones(rows, length, dtype=torch.long)
    padding[0, :10] = 0  # a left-padded prompt
    hidden = model.model.embed_tokens(ids).detach().requires_grad_()
    positions = torch.arange(length)[None].expand(rows, length)
    rotary = model.model.rotary_emb(hidden, positions)
    mask = create_causal_mask(config=config, inputs_embeds=hidden, attention_mask=padding, past_key_values=None,
                              position_ids=positions)
    saved = {}

    def keep(tensor):
        storage = tensor.untyped_storage()
        saved[storage.data_ptr()] = storage.nbytes()
        return tensor

    layer = model.model.layers[0]
    with torch.autocast("cpu", dtype=torch.bfloat16), torch.autograd.graph.saved_tensors_hooks(keep, lambda t: t):
        layer(hidden, attention_mask=mask, position_ids=positions, position_embeddings=rotary)
    apart = {t.untyped_storage().data_ptr() for t in [*layer.parameters(), hidden, *rotary]}
    counted = sum(size for pointer, size in saved.items() if pointer not in apart)
    assert counted == rows * length * layer_saved_bytes_per_token(shape, 2, length)


def test_the_fused_lm_head_tile_is_trls():
    from trl.kernels.chunked_logprob import TOKEN_CHUNK_SIZE
    from trl.trainer.utils import _CHUNKED_LOGPROB_CHUNK_SIZE

    from balagg.train.memory import LOGIT_TILE

    assert LOGIT_TILE == (TOKEN_CHUNK_SIZE, _CHUNKED_LOGPROB_CHUNK_SIZE)


def test_every_micro_batch_reduces_its_gradient():
    """The trainer's arguments ask accelerate to sync every micro-batch, so transformers' accumulation loop
    never enters no_sync (under FSDP2 that would keep every parameter's whole gradient between
    micro-batches; tests/test_fsdp2_accumulation.py runs it)."""
    from trl import GRPOConfig

    from balagg.train.config import CellConfig, grpo_config_kwargs

    cell = CellConfig(model="m", train_files=["t.jsonl"], aggregator="token-agg", seed=0, prompts_per_step=4,
                      num_generations=4, mini_batches=1, micro_batch_size=2, save_every=1)
    args = GRPOConfig(**grpo_config_kwargs(cell, "/tmp/unused"), use_cpu=True)
    assert cell.gradient_accumulation_steps == 8
    assert args.accelerator_config.gradient_accumulation_kwargs == {"sync_each_batch": True}
