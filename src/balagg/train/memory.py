"""Per-GPU memory of a train job and of an evaluation job, term by term, before anything runs (``balagg plan``).

A train job of a cell runs one process per GPU: TRL's colocated vLLM engine and the policy, a decoder of
:class:`ModelShape` (Qwen2, Qwen3, Llama: ``config.json``'s fields), in fp32 master weights, trained with AdamW
under bf16 autocast and gradient checkpointing, sharded by FSDP2 over the job's ``W`` GPUs (``P`` parameters;
``p``, ``r``, ``a``: bytes of the parameter, reduce and activation dtypes, 2, 4 and 2 under
configs/accelerate/fsdp2.yaml's policy; ``T`` = ``micro_batch_size`` x (``max_prompt_length`` +
``max_completion_length``), the widest micro-batch a step can hold). Each term and where the pinned libraries
decide it:

held for the whole run
- the rollout engine: ``vllm_gpu_memory_utilization`` x the GPU's memory. vLLM sizes its KV cache so that its
  weights, its profiled activation peak and the cache fill that share (vllm ``v1/worker/gpu_worker.py``,
  ``Worker.determine_available_memory``); TRL's colocate mode passes the setting through
  (trl ``GRPOTrainer.__init__``); balagg leaves sleep mode off, so the share is held all run;
- weights 4 P / W, gradients 4 P / W, AdamW's two moments 8 P / W: FSDP2 keeps each sharded parameter in its
  original dtype (torch ``_fsdp_param.py``, ``FSDPParam.init_dtype_attrs``: fp32, the dtype the model is
  loaded in), reduce-scatters the gradient into a shard of that dtype (torch ``_fsdp_collectives.py``,
  ``foreach_reduce``), and AdamW allocates ``exp_avg`` / ``exp_avg_sq`` like the parameter (torch
  ``optim/adamw.py``, ``_init_group``);
- gradients between micro-batches: none, because every micro-batch reduce-scatters (:data:`SYNC_EACH_BATCH`,
  set by :func:`balagg.train.config.grpo_config_kwargs`). Without it transformers runs micro-batches
  1..GA-1 under ``accelerator.no_sync`` (transformers ``Trainer._inner_training_loop``), which under FSDP2
  is ``set_requires_gradient_sync(False)`` (accelerate ``Accelerator.no_sync``), and FSDP2 keeps every
  parameter's whole gradient, cast to the reduce dtype, from one micro-batch to the next (torch
  ``_fsdp_param_group.py``, ``FSDPParamGroup.post_backward``; ``_fsdp_param.py``,
  ``FSDPParam.to_accumulated_grad_if_needed``): P x r more per GPU;
- the CUDA context with its library workspaces, NCCL's buffers, and the engine's CUDA graphs (captured
  after its KV cache is sized, outside its share: vllm ``Worker.compile_or_warm_up_model``; TRL builds the
  engine without ``enforce_eager``): :data:`CUDA_CONTEXT_BYTES`, :data:`NCCL_BYTES`, :data:`ENGINE_GRAPH_BYTES`,
  stated, to be measured (bench/gpu_smoke.sh).

per micro-batch, at the moment of each phase (the peak is the largest phase)
- ``backward`` (the backward of the last decoder layer, where the activations peak): the root module's
  parameters gathered in p (embeddings, LM head, final norm: the root is not resharded after forward,
  torch ``_fsdp_state.py``, ``FSDPState._lazy_init``) and two decoder layers' (the one computing and the
  one prefetched, ``FSDPParamGroup._backward_prefetch``); the LM head weight's gradient in p, made at the
  start of the backward and kept until the root's reduce-scatter; one layer's gradient in p and its
  reduce-scatter input in r (one input buffer in flight, ``reduce_scatter_max_input_buffers`` = 1);
  the checkpointed layer inputs L x T x H x a (transformers' gradient checkpointing keeps each layer's input,
  ``GradientCheckpointingLayer``); the 4-D attention mask transformers builds for SDPA when a micro-batch
  has padding, T x S bytes; and one layer's recompute and backward, T x (:func:`layer_saved_bytes_per_token`
  + :func:`layer_backward_bytes_per_token`);
- ``LM head backward``: TRL's fused LM head (trl ``add_fused_lm_head``; ``kernels/chunked_logprob.py``,
  ``ChunkedLogProbFunction``: the log-probs in tiles, never the [T, V] logits) accumulates the weight's
  gradient in fp32 (V x H x 4) and the hidden states' in fp32 (N x H x 4, N the scored completion tokens),
  casts both to their dtypes, and tiles the logits 4096 x 32768 at a time; the checkpoints and the root are
  held meanwhile;
- ``root reduce-scatter`` (the end of the backward): the root's gradients in p and their reduce-scatter
  input in r;
- ``optimiser step``: AdamW's foreach implementation makes one state-sized temporary (the square root of
  ``exp_avg_sq``, torch ``optim/adamw.py``, ``_multi_tensor_adamw``): 4 P / W;
- allocator slack: :data:`ALLOCATOR_SLACK` of the training's peak allocation (expandable segments).

An evaluation job holds one vLLM engine at ``GenerationConfig.gpu_memory_utilization`` of its GPU: the bf16
weights 2 P, an activation peak of its ``max_num_batched_tokens`` (:data:`ENGINE_BATCHED_TOKENS`) and the
sampler's logits, and the KV cache in the rest, 2 x L x kv heads x head_dim x 2 bytes per token; the CUDA
context and its CUDA graphs lie outside the share.

The state terms are checked against a counted FSDP2 run on the CPU (tests/test_fsdp2_accumulation.py); the
whole train figure against bench/gpu_smoke.sh's measured peak on a GPU (docs/performance.md).
"""

from __future__ import annotations

from dataclasses import dataclass

from balagg.config_schema import Checked, setting

GIB = 1 << 30

SYNC_EACH_BATCH = True
"""Every micro-batch reduces its gradient (accelerate's ``gradient_accumulation_kwargs.sync_each_batch``,
passed by :func:`balagg.train.config.grpo_config_kwargs`): no unsharded gradient lives between micro-batches.
Under DDP the cost is an all-reduce per micro-batch instead of per step, and the memory is the same."""

DEVICE_SHARE = 0.99
"""Share of a GPU's nominal memory that CUDA reports as its total (an 80 GB H100: 79.19 GiB), which
``vllm_gpu_memory_utilization`` and the free memory are fractions of."""
CUDA_CONTEXT_BYTES = 1.0 * GIB
"""One process's CUDA context with cuBLAS / cuDNN handles and workspaces (the engine shares it)."""
NCCL_BYTES = 1.0 * GIB
"""NCCL's buffers of the training's process group on a node (none for one GPU)."""
ENGINE_GRAPH_BYTES = 1.0 * GIB
"""CUDA graphs of a vLLM engine, captured outside its memory share."""
ALLOCATOR_SLACK = 0.05
"""Reserved but unallocated memory, as a share of the training's peak allocation (expandable segments)."""
LOGIT_TILE = (4096, 32768)
"""Rows and vocabulary columns of the fused LM head's logits tile (trl ``kernels/chunked_logprob.py``:
``TOKEN_CHUNK_SIZE`` and ``utils._CHUNKED_LOGPROB_CHUNK_SIZE``)."""
ENGINE_BATCHED_TOKENS = 8192
"""Tokens of vLLM's profiling forward pass in an evaluation job (its ``max_num_batched_tokens``)."""
ENGINE_SEQUENCES = 256
"""Sequences whose logits vLLM's sampler holds at once (its ``max_num_seqs``)."""


@dataclass(frozen=True)
class ModelShape(Checked):
    """A decoder's shape, named as in its config.json (Qwen2, Qwen3, Llama families): the per-GPU memory of
    its train and evaluation jobs in balagg plan; its parameter count is the default of parameters."""

    config_name = "model shape"

    hidden_size: int = setting(minimum=1)
    num_hidden_layers: int = setting(minimum=1)
    intermediate_size: int = setting(minimum=1)
    vocab_size: int = setting(minimum=1)
    num_attention_heads: int = setting(minimum=1)
    num_key_value_heads: int = setting(minimum=1)
    head_dim: int | None = setting(None, "default hidden_size / num_attention_heads", minimum=1)
    tie_word_embeddings: bool = setting(False)
    attention_bias: bool = setting(False, "Qwen2: the q, k, v projections carry a bias")
    qk_norm: bool = setting(False, "Qwen3: an RMSNorm on each query and key head")
    max_position_embeddings: int | None = setting(
        None, "the model's own context (the evaluation engine's length)", minimum=1)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.head_dim is None and self.hidden_size % self.num_attention_heads:
            raise ValueError("model shape: hidden_size is not a multiple of num_attention_heads; set head_dim")

    @property
    def head(self) -> int:
        return self.head_dim or self.hidden_size // self.num_attention_heads

    @property
    def q_width(self) -> int:
        return self.num_attention_heads * self.head

    @property
    def kv_width(self) -> int:
        return self.num_key_value_heads * self.head

    @property
    def layer_parameters(self) -> int:
        """One decoder layer: attention projections (with Qwen2's biases), Qwen3's head norms, the SwiGLU
        MLP and the two RMSNorms."""
        h, q, kv = self.hidden_size, self.q_width, self.kv_width
        attention = h * q + 2 * h * kv + q * h + (q + 2 * kv if self.attention_bias else 0)
        norms = 2 * h + (2 * self.head if self.qk_norm else 0)
        return attention + 3 * h * self.intermediate_size + norms

    @property
    def root_parameters(self) -> int:
        """What FSDP2's root module holds: the embeddings, the LM head unless tied, the final norm."""
        embedding = self.vocab_size * self.hidden_size
        return embedding * (1 if self.tie_word_embeddings else 2) + self.hidden_size

    @property
    def parameters(self) -> int:
        return self.num_hidden_layers * self.layer_parameters + self.root_parameters

    @property
    def kv_bytes_per_token(self) -> int:
        """KV cache of one token in bf16: keys and values of every layer."""
        return 2 * self.num_hidden_layers * self.kv_width * 2


def layer_saved_bytes_per_token(shape: ModelShape, a: int, sequence: int) -> int:
    """Bytes per token that autograd keeps for one decoder layer's backward when its forward runs under
    autocast with activations of ``a`` bytes, in rows of ``sequence`` tokens with padding (transformers'
    Qwen2/Qwen3 decoder layer; tests/test_train_memory.py counts them on the CPU):

    - each RMSNorm keeps its fp32 input, its inverse root and its cast to the activation dtype, and its output
      is kept as the projections' input (``Qwen2RMSNorm.forward``): 2 x ((4 + 2 a) H + 4); Qwen3's head
      norms keep the same of q and k but their outputs, which the rotary embedding does not keep:
      (4 + a)(q + kv) + 4 (heads + kv heads);
    - attention: the rotated queries a q, the keys and values repeated to the query heads 2 a q (with a
      padding mask ``sdpa_attention_forward`` does not use SDPA's own grouped-query path:
      ``use_gqa_in_sdpa``), the output a q (the output projection's input), its log-sum-exp 4 x heads, and
      SDPA's copy of the 4-D mask in the activation dtype, a x ``sequence``;
    - the MLP's gate, up, activation and product 4 a I (``Qwen2MLP.forward``).
    The layer's input is the checkpoint, counted apart; the rotary tables are shared by the layers."""
    h, q, kv, i = shape.hidden_size, shape.q_width, shape.kv_width, shape.intermediate_size
    norms = 2 * ((4 + 2 * a) * h + 4)
    if shape.qk_norm:
        norms += (4 + a) * (q + kv) + 4 * (shape.num_attention_heads + shape.num_key_value_heads)
    attention = a * q + 2 * a * q + a * q + 4 * shape.num_attention_heads + a * sequence
    return norms + attention + 4 * a * i


def layer_backward_bytes_per_token(shape: ModelShape, a: int) -> int:
    """Gradients one decoder layer's backward holds at once beyond what it keeps (an estimate, measured by
    bench/gpu_smoke.sh): three I-wide ones in the MLP (the product's, the activation's, the up projection's)
    and two H-wide ones, 3 a I + 2 a H."""
    return 3 * a * shape.intermediate_size + 2 * a * shape.hidden_size


@dataclass(frozen=True)
class Term:
    name: str
    bytes: float


@dataclass(frozen=True)
class GPUMemory:
    """A job's memory on one GPU: what it holds all along, its phases (the largest is the peak) and the
    device's usable total."""

    total: float
    persistent: tuple[Term, ...]
    phases: dict[str, tuple[Term, ...]]
    slack_share: float = 0.0  # of the allocation (persistent training terms and the phase), the allocator's slack
    slack_base: float = 0.0  # bytes of the persistent terms the slack applies to (the engine's own is inside its share)

    def phase_bytes(self, phase: str) -> float:
        return sum(term.bytes for term in self.phases[phase])

    @property
    def peak_phase(self) -> str:
        return max(self.phases, key=self.phase_bytes)

    @property
    def slack(self) -> float:
        return self.slack_share * (self.slack_base + self.phase_bytes(self.peak_phase))

    @property
    def peak(self) -> float:
        return sum(term.bytes for term in self.persistent) + self.phase_bytes(self.peak_phase) + self.slack

    @property
    def free_share(self) -> float:
        return 1 - self.peak / self.total


def device_bytes(gpu_memory_gb: float) -> float:
    """What CUDA reports as the total of a GPU of ``gpu_memory_gb`` nominal GB (:data:`DEVICE_SHARE`)."""
    return gpu_memory_gb * GIB * DEVICE_SHARE


def train_memory(shape: ModelShape, *, gpus: int, gpu_memory_gb: float, micro_batch_size: int,
                 prompt_tokens: int, completion_tokens: int, bf16: bool, reduce_bytes: int, sharded: bool,
                 engine_share: float | None, gradient_checkpointing: bool = True,
                 sync_each_batch: bool = SYNC_EACH_BATCH) -> GPUMemory:
    """One train job's GPU (module docstring). ``prompt_tokens`` + ``completion_tokens``: the widest row of a
    micro-batch; ``reduce_bytes``: the gradient reduction's dtype; ``sharded``: FSDP2 (else every GPU holds
    the whole state: one GPU, or DDP with its gradient buckets); ``engine_share``: the colocated engine's
    ``vllm_gpu_memory_utilization`` (None: no engine)."""
    P, L, H, V = shape.parameters, shape.num_hidden_layers, shape.hidden_size, shape.vocab_size
    p = 2 if bf16 else 4
    a = 2 if bf16 else 4
    total = device_bytes(gpu_memory_gb)
    world = gpus if sharded else 1
    rows, width = micro_batch_size, prompt_tokens + completion_tokens
    T, N = rows * width, rows * completion_tokens
    persistent = []
    if engine_share:
        persistent.append(Term(f"rollout engine ({engine_share:g} of the GPU)", engine_share * total))
    persistent += [Term("weights (fp32, sharded)" if sharded else "weights (fp32)", 4 * P / world),
                   Term("gradients (fp32, sharded)" if sharded else "gradients (fp32)", 4 * P / world),
                   Term("AdamW moments (2 x fp32, sharded)" if sharded else "AdamW moments (2 x fp32)", 8 * P / world)]
    if sharded:
        persistent.append(Term("gradients kept between micro-batches" + (" (none: every micro-batch "
                          "reduce-scatters)" if sync_each_batch else " (no_sync: whole, in the reduce dtype)"),
                          0.0 if sync_each_batch else P * reduce_bytes))
    elif gpus > 1:
        persistent.append(Term("DDP gradient buckets (fp32)", 4 * P))
    trained = sum(term.bytes for term in persistent[1 if engine_share else 0:])
    persistent += [Term("CUDA context", CUDA_CONTEXT_BYTES)]
    if gpus > 1:
        persistent.append(Term("NCCL buffers", NCCL_BYTES))
    if engine_share:
        persistent.append(Term("engine CUDA graphs", ENGINE_GRAPH_BYTES))

    layer, root, lm_head = shape.layer_parameters, shape.root_parameters, V * H
    if sharded:
        gathered = [Term("root gathered (embeddings, LM head, norm)", root * p),
                    Term("two decoder layers gathered", 2 * layer * p)]
        layer_grads = Term("a layer's gradient and its reduce-scatter input", layer * (p + reduce_bytes))
    else:
        gathered = [Term("bf16 copies of the weights (autocast)", P * p)] if bf16 else []
        layer_grads = Term("a layer's gradient", 0.0)  # written into the state's gradients
    saved, backward = layer_saved_bytes_per_token(shape, a, width), layer_backward_bytes_per_token(shape, a)
    if gradient_checkpointing:
        kept = [Term(f"checkpointed layer inputs ({L} x {T:,} tokens x H)", L * T * H * a),
                Term("one layer's recompute and backward", T * (saved + backward))]
    else:
        kept = [Term(f"activations of all {L} layers and one backward", T * (L * (saved + H * a) + backward))]
    mask = Term("4-D attention mask (boolean)", rows * width * width)
    rows_tile, columns_tile = LOGIT_TILE
    phases = {
        "backward": (*gathered, Term("LM head gradient", lm_head * p), layer_grads, *kept, mask),
        "LM head backward": (*gathered[:1], kept[0], mask,
                             Term("fused LM head backward (fp32 gradients, their casts, a logits tile)",
                                  lm_head * (4 + p) + N * H * (4 + a) + rows_tile * columns_tile * a)),
        "root reduce-scatter": (*gathered[:1], Term("root gradients and their reduce-scatter input",
                                                    root * (p + (reduce_bytes if sharded else 0)))),
        "optimiser step": (Term("AdamW's foreach temporary", 4 * P / world),),
    }
    return GPUMemory(total=total, persistent=tuple(persistent), phases=phases, slack_share=ALLOCATOR_SLACK,
                     slack_base=trained)


@dataclass(frozen=True)
class EngineMemory:
    """An evaluation job's GPU: the engine's share and what fills it, and what lies outside it."""

    total: float
    share: float
    weights: float
    activations: float
    outside: float  # CUDA context and the engine's CUDA graphs
    kv_bytes_per_token: int

    @property
    def engine(self) -> float:
        return self.share * self.total

    @property
    def kv_cache(self) -> float:
        return self.engine - self.weights - self.activations

    @property
    def kv_tokens(self) -> float:
        return max(self.kv_cache, 0.0) / self.kv_bytes_per_token

    @property
    def free(self) -> float:
        return self.total - self.engine - self.outside


def eval_memory(shape: ModelShape, *, gpu_memory_gb: float, engine_share: float) -> EngineMemory:
    """One evaluation job's GPU (module docstring): bf16 weights, the profiling pass's activations (one
    layer's working set over :data:`ENGINE_BATCHED_TOKENS` tokens) and fp32 logits of
    :data:`ENGINE_SEQUENCES` sequences, twice (logits and probabilities), inside the share."""
    h, i = shape.hidden_size, shape.intermediate_size
    activations = ENGINE_BATCHED_TOKENS * 2 * (3 * i + 6 * h) + 2 * ENGINE_SEQUENCES * shape.vocab_size * 4
    return EngineMemory(total=device_bytes(gpu_memory_gb), share=engine_share, weights=2 * shape.parameters,
                        activations=activations, outside=CUDA_CONTEXT_BYTES + ENGINE_GRAPH_BYTES,
                        kv_bytes_per_token=shape.kv_bytes_per_token)
