"""A campaign's cost before it runs: jobs, GPUs, tokens, GPU-hours, disk and memory, per cell and in total.

Everything follows from the workflow config (the merged ``--configfile`` files) and the ``plan`` section's
stated assumptions; nothing is measured here. Per cell (model x dataset x aggregator x seed), with ``G``
responses per prompt, ``P`` prompts per rollout batch, ``L`` the completion budget and ``f`` the
``completion_fraction``:

    rollout batches     R = ceil(total_steps / (mini_batches * num_iterations))
    generated tokens    T = R * P * G * f * L                    (train tokens: what the rollouts sample)
    micro-batch width   w = prompt_tokens + E[width of a micro-batch's completion part]
    padded tokens       D = R * P * G * w                        (what one forward/backward pass computes)
    log-prob pass       D' = R * P * G * w'                      (w': the same for TRL's log-prob chunks)
    train GPU-seconds   T / v_rollout + (D * num_iterations + D' * a/4) / v_fb
    eval checkpoints    K = the trained checkpoints (every eval_every and the last; step 0 is the model's)
    eval tokens         E = K * n * (sum of problems over the benchmarks) * f * eval.max_tokens
    eval GPU-seconds    E / v_generate
    wall hours          GPU-hours / GPUs per job (train: one job; evaluation: per checkpoint job)

The trainer (:mod:`balagg.train.padding`) trims each micro-batch to its own widest row (its longest
prompt, its longest completion), so a micro-batch of ``m`` rows (``micro_batch_size``) computes ``m * w``
tokens, and it sorts each optimiser step's rows on a GPU by width before cutting them into micro-batches
(``length_sorted_microbatches``; not for the micro-batch rules, whose weights depend on the cut), and the
rows of its log-prob pass likewise. The completion widths come from the stated length model of
:mod:`balagg.completion_lengths` (clipped exponential with mean ``f * L``): the mean width of sorted
micro-batches of ``m`` out of a step's rows on a GPU, else the expected longest of ``m`` rows; without
trimming (``trim_padding: false``) every micro-batch is as wide as the longest of the GPU's rollout
batch, as in TRL. ``prompt_tokens`` is the expected width of a micro-batch's prompt part (default
``max_prompt_length``, an upper bound). ``a`` is 1 when TRL runs a log-prob forward pass over the
rollout batch before training on it (old log-probs: ``mini_batches * num_iterations > 1``, or vLLM
rollouts with the importance-sampling correction); a forward pass alone is taken as a quarter of a
forward + backward with gradient checkpointing (forward, recomputed forward, backward twice the
forward). Not modelled: optimiser steps, weight syncs to the engine, reward verification and job
start-up. Checkpoint saves are, at the file system's ``write_bytes_per_s`` (every GPU of the job waits):

    save hours          ((R_s + stops) * N * 12 + K * N * 2) / write_bytes_per_s / 3600
    train wall hours    train GPU-seconds / GPUs / 3600 + save hours        (train GPU-hours add saves x GPUs)

with ``R_s`` = ceil(total_steps / save_every) scheduled resumable saves (the last step's included) and
``stops`` = one more per job that stops at ``train_resources.runtime`` (jobs - 1).

Rates, per GPU (``plan`` section; ``plan.models.<name>`` overrides):

- ``forward_backward_tokens_per_s_per_gpu`` (``v_fb``): padded tokens (every column of a micro-batch,
  prompt and completion, padding included) through one forward + backward pass with gradient
  checkpointing per second -- the quantity ``bench/gpu_smoke.sh`` measures as ``tokens_per_s`` of its
  ``probe-7b`` step in ``gpu_smoke.json`` (:data:`MEASURED_RATE`, at the full width prompt + completion);
- ``rollout_tokens_per_s_per_gpu`` (``v_rollout``): tokens sampled per second by the train job's
  colocated engine over a whole rollout batch (its wait for the longest responses included);
- ``generate_tokens_per_s_per_gpu`` (``v_generate``): tokens sampled per second in an evaluation job.

Disk, with ``N`` = ``parameters`` (stated per model) and ``keep`` = ``keep_checkpoints``:

    eval checkpoints    K * N * 2 bytes            (bf16 weights, steps > 0; all kept)
    resumable state     N * 12 bytes each          (fp32 weights + AdamW's two fp32 moments, sharded over
                                                    the ranks; ``keep`` kept, one more while saving)
    per cell            K * N * 2 + (keep + 1) * N * 12    (its peak, at its last save)
    initial model       N * 2 bytes                (the hub snapshot, bf16)

The total is the sum: every cell at its peak at once, the grid's upper bound. After training a cell keeps
its evaluation checkpoints alone (``K * N * 2``; plus ``keep * N * 12`` with ``keep_resumable_state``): the
trainer removes its resumable state. Per-GPU memory of each model's train and evaluation job is
:mod:`balagg.train.memory`'s, from ``plan.models.<name>.shape`` (config.json's fields) and the jobs'
``gpu_memory_gb``; a train job that keeps under 10 % of its GPU free is marked OVER. Host memory of a train job
(its load path, the largest): every rank materialises the whole model in fp32 on the host before FSDP
shards it (transformers loads it on each rank, zeros on all but the first when accelerate's RAM-efficient
loading is on), beside its own process (CUDA context, libraries, the colocated vLLM engine, the dataset):

    train host memory   ranks * (N * 4 bytes + HOST_BYTES_PER_RANK)

Each model's step 0 is evaluated once (``initial``). ``bench_problems`` gives a benchmark's size where the
data registry has none (LiveCodeBench's window) or to plan a subset.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from pathlib import Path

from balagg.completion_lengths import CompletionLengths
from balagg.config_schema import Checked, from_mapping, setting
from balagg.data.sources import SOURCES
from balagg.grid import Grid
from balagg.layout import TINYWORLD_SOURCE
from balagg.aggregation.rules import MICRO_BATCH_RULES
from balagg.settings import TINYWORLD
from balagg.train.memory import GIB, EngineMemory, GPUMemory, ModelShape, eval_memory, train_memory

MEASURED_RATE = ("gpu_smoke.json", "probe-7b", "tokens_per_s")
"""Where ``forward_backward_tokens_per_s_per_gpu`` is measured: file, step, key (bench/gpu_smoke.py)."""
FORWARD_SHARE = 0.25  # a forward pass alone, as a share of a forward + backward with gradient checkpointing
EVAL_BYTES_PER_PARAMETER = 2  # bf16 evaluation checkpoints
STATE_BYTES_PER_PARAMETER = 12  # fp32 weights + AdamW exp_avg and exp_avg_sq in fp32
LOAD_BYTES_PER_PARAMETER = 4  # fp32 master weights, materialised on the host by every rank while loading
HOST_BYTES_PER_RANK = 10e9  # one rank's process besides the weights: CUDA context, libraries, vLLM engine, data
SHAPE_TOLERANCE = 0.005  # a stated parameter count may differ this much from its shape's (rounding)
FREE_GPU_SHARE = 0.10  # a train job's GPU must keep this much of its memory free (OVER otherwise)


@dataclass(frozen=True)
class Rates(Checked):
    """The stated assumptions for one model (``plan`` section, ``plan.models.<name>`` overriding)."""

    config_name = "plan"

    completion_fraction: float = setting(0.5, "expected completion length as a fraction of the maximum",
                                         exclusive_minimum=0, maximum=1)
    prompt_tokens: int | None = setting(
        None, "expected prompt width of a micro-batch (null: max_prompt_length, an upper bound)", minimum=1)
    forward_backward_tokens_per_s_per_gpu: float = setting(
        5000.0, "padded tokens per second per GPU through forward + backward (bench/gpu_smoke.sh's probe-7b "
        "tokens_per_s)", exclusive_minimum=0)
    rollout_tokens_per_s_per_gpu: float = setting(2000.0, "tokens sampled per second per GPU in train jobs",
                                                  exclusive_minimum=0)
    generate_tokens_per_s_per_gpu: float = setting(5000.0, "tokens sampled per second per GPU in evaluation jobs",
                                                   exclusive_minimum=0)
    parameters: float | None = setting(
        None, "the model's parameter count: checkpoint disk and train host memory (null: its shape's count, "
        "else not estimated)", exclusive_minimum=0)
    shape: ModelShape | None = setting(
        None, "the model's shape, config.json's fields (balagg.train.memory.ModelShape): per-GPU memory of its "
        "train and evaluation jobs; its parameter count is the default of parameters")
    write_bytes_per_s: float = setting(
        500e6, "file-system write bandwidth a job's checkpoint saves get, bytes/s (default 500 MB/s, a shared "
        "network file system written from one node): the time of every save", exclusive_minimum=0)


@dataclass(frozen=True)
class ModelFigures:
    """What the plan derives once per model: widths, the evaluation job, host memory, checkpoint sizes."""

    model: str
    rates: Rates
    lengths: CompletionLengths
    micro_batch_size: int
    rank_rows: int  # responses of one rollout batch per train GPU
    step_rows: int  # responses of one optimiser step per train GPU
    trim: bool  # trim_padding: micro-batches at their own width
    sort: bool  # length_sorted_microbatches: a step's rows sorted by width before the cut
    logprob_pass: bool  # TRL's old-log-prob forward pass over each rollout batch
    eval_job_hours: float  # one generation job (one checkpoint)
    generate_runtime_hours: float
    train_ranks: int
    train_mem_bytes: float  # train_resources.mem_mb
    checkpoints: int  # trained evaluation checkpoints per cell
    keep_checkpoints: int
    resumable_saves: int = 0  # a cell's scheduled resumable saves: every save_every steps and the last step
    keep_resumable_state: bool = False  # the resumable checkpoints stay after training
    train_memory: GPUMemory | None = None  # one GPU of a train job (None: memory_note says why)
    train_engine: EngineMemory | None = None  # the colocated engine's share and what fills it
    train_sequence: int = 0  # prompt + completion: the longest sequence of the train engine
    eval_memory: EngineMemory | None = None  # one evaluation job's GPU
    eval_context: int | None = None  # the evaluation engine's length (the model's effective context)
    memory_note: str = ""  # how the train job is distributed, or why its memory is not estimated

    @property
    def untrimmed_width(self) -> float:
        """Expected widest completion of a GPU's whole rollout batch: every micro-batch's, untrimmed."""
        return self.lengths.expected_max(self.rank_rows)

    @property
    def unsorted_width(self) -> float:
        """Expected widest completion of a trimmed micro-batch whose rows are in no particular order."""
        return self.lengths.expected_max(self.micro_batch_size)

    def completion_width(self, aggregator: str) -> float:
        """Expected completion width of a training micro-batch of a cell with ``aggregator``."""
        if not self.trim:
            return self.untrimmed_width
        if self.sort and aggregator not in MICRO_BATCH_RULES:
            return self.lengths.expected_sorted_width(self.step_rows, self.micro_batch_size)
        return self.unsorted_width

    @property
    def logprob_completion_width(self) -> float:
        """Expected completion width of a chunk of the log-prob pass (a GPU's rollout rows sorted when trimmed)."""
        if not self.trim:
            return self.untrimmed_width
        return self.lengths.expected_sorted_width(self.rank_rows, self.micro_batch_size)

    @property
    def eval_checkpoint_bytes(self) -> float | None:
        return None if self.rates.parameters is None else self.rates.parameters * EVAL_BYTES_PER_PARAMETER

    @property
    def state_bytes(self) -> float | None:
        return None if self.rates.parameters is None else self.rates.parameters * STATE_BYTES_PER_PARAMETER

    @property
    def cell_disk_bytes(self) -> float | None:
        if self.rates.parameters is None:
            return None
        return self.checkpoints * self.eval_checkpoint_bytes + (self.keep_checkpoints + 1) * self.state_bytes

    @property
    def resumable_save_hours(self) -> float | None:
        """One resumable save: 12 P bytes, every rank its shard, at the file system's write bandwidth."""
        return None if self.state_bytes is None else self.state_bytes / self.rates.write_bytes_per_s / 3600

    @property
    def eval_save_hours(self) -> float | None:
        """One evaluation checkpoint: 2 P bytes gathered and written by the first rank."""
        return None if self.eval_checkpoint_bytes is None else \
            self.eval_checkpoint_bytes / self.rates.write_bytes_per_s / 3600

    def save_hours(self, stops: int = 0) -> float:
        """A cell's saves: its scheduled resumable saves and ``stops`` more (one per job that stops at its
        time limit), and its evaluation checkpoints (0 when the size is unknown)."""
        if self.rates.parameters is None:
            return 0.0
        return (self.resumable_saves + stops) * self.resumable_save_hours + self.checkpoints * self.eval_save_hours

    @property
    def kept_bytes(self) -> float | None:
        """What a cell leaves on disk after training: its evaluation checkpoints (and its ``keep_checkpoints``
        resumable ones with ``keep_resumable_state``); the resumable state is removed (balagg.train.run)."""
        if self.rates.parameters is None:
            return None
        kept_state = self.keep_checkpoints * self.state_bytes if self.keep_resumable_state else 0
        return self.checkpoints * self.eval_checkpoint_bytes + kept_state

    @property
    def train_host_bytes(self) -> float | None:
        if self.rates.parameters is None:
            return None
        return self.train_ranks * (self.rates.parameters * LOAD_BYTES_PER_PARAMETER + HOST_BYTES_PER_RANK)


@dataclass
class Line:
    """One row of the plan: a cell, a model's initial evaluation, or the total."""

    name: str
    jobs: dict[str, int]
    train_gpus: int = 0
    generate_gpus: int = 0
    train_tokens: float = 0.0  # generated in rollouts
    padded_tokens: float = 0.0  # through one forward + backward pass (micro-batches at their own width)
    eval_tokens: float = 0.0
    train_gpu_hours: float = 0.0
    eval_gpu_hours: float = 0.0
    train_wall_hours: float = 0.0  # one train job
    train_runtime_hours: float | None = None  # the job's configured limit
    save_hours: float = 0.0  # of the train wall hours, the checkpoint saves'
    disk_bytes: float | None = 0.0  # None: unknown (no parameter count); a cell's peak while it trains
    kept_bytes: float | None = 0.0  # what stays after training (a model's snapshot; a cell's evaluation checkpoints)

    def add(self, other: Line) -> None:
        for key, count in other.jobs.items():
            self.jobs[key] = self.jobs.get(key, 0) + count
        for name in ("train_tokens", "padded_tokens", "eval_tokens", "train_gpu_hours", "eval_gpu_hours", "save_hours"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.disk_bytes = None if None in (self.disk_bytes, other.disk_bytes) else self.disk_bytes + other.disk_bytes
        self.kept_bytes = None if None in (self.kept_bytes, other.kept_bytes) else self.kept_bytes + other.kept_bytes


def model_rates(config: dict, model: str) -> Rates:
    """The ``plan`` section's rates with ``plan.models.<model>``'s over them (their bounds: :class:`Rates`)."""
    plan = config.get("plan", {})
    known = {f.name for f in fields(Rates)}
    values = {k: v for k, v in plan.items() if k in known} | plan.get("models", {}).get(model, {})
    rates = from_mapping(Rates, values, f"plan.models.{model}")
    if rates.shape is not None:
        shape = rates.shape
        if rates.parameters is None:
            rates = replace(rates, parameters=shape.parameters)
        elif abs(rates.parameters - shape.parameters) > SHAPE_TOLERANCE * shape.parameters:
            raise ValueError(f"plan: parameters of {model} ({rates.parameters:,.0f}) differ from its shape's "
                             f"({shape.parameters:,}); correct one of them")
    return rates


def bench_problems(config: dict, model: str | None = None) -> dict[str, int]:
    """Problems per configured benchmark that ``model`` (default: the first) is evaluated on:
    ``plan.bench_problems``, the tiny world's size in the model's task family, or the registry's."""
    from balagg.tinyworld.raw import bench_size
    from balagg.tinyworld.regimes import model_family

    given = config.get("plan", {}).get("bench_problems", {})
    family = model_family(config["models"][model or next(iter(config["models"]))])
    asked = config.get("tinyworld", {}).get("bench_problems", TINYWORLD.bench_problems)
    sizes = {}
    for name, source in config["benchmarks"].items():
        if name in given:
            sizes[name] = given[name]
        elif source == TINYWORLD_SOURCE:
            sizes[name] = bench_size(family, name, asked)
        elif SOURCES[name].expected_rows is not None:
            sizes[name] = SOURCES[name].expected_rows
        else:
            raise ValueError(f"plan: benchmark {name} has no known size; set plan.bench_problems.{name}")
    return sizes


def logprob_pass(train: dict) -> bool:
    """Whether TRL computes old log-probs with a forward pass over each rollout batch: its condition
    ``gradient_accumulation_steps % (steps_per_generation * num_iterations) != 0`` (with balagg's
    ``steps_per_generation = gradient_accumulation_steps * mini_batches``) or vLLM's importance correction."""
    return (train["mini_batches"] * train["num_iterations"] > 1
            or bool(train["use_vllm"] and train["vllm_importance_sampling_correction"]))


def per_checkpoint_eval_tokens(config: dict, model: str, rates: Rates) -> float:
    evaluation = config.get("eval", {})
    n, eval_max = evaluation.get("n", 8), evaluation.get("max_tokens", 8192)
    return n * sum(bench_problems(config, model).values()) * rates.completion_fraction * eval_max


def model_figures(grid: Grid, model: str) -> ModelFigures:
    """The per-model quantities of the module docstring."""
    config = grid.config
    rates = model_rates(config, model)
    train = grid.full_train_settings(model)
    if rates.prompt_tokens is None:
        rates = replace(rates, prompt_tokens=train["max_prompt_length"])
    if not 1 <= rates.prompt_tokens <= train["max_prompt_length"]:
        raise ValueError(f"plan: prompt_tokens of {model} must be in [1, max_prompt_length="
                         f"{train['max_prompt_length']}], got {rates.prompt_tokens}")
    train_gpus = max(grid.resource(model, "train_resources", "gpus"), 1)
    generate_gpus = max(grid.resource(model, "generate_resources", "gpus"), 1)
    lengths = CompletionLengths(train["max_completion_length"], rates.completion_fraction)
    rank_rows = math.ceil(train["prompts_per_step"] * train["num_generations"] / train_gpus)
    step_rows = math.ceil(rank_rows / train["mini_batches"])
    checkpoints = grid.evaluated_checkpoints(model)
    eval_seconds = per_checkpoint_eval_tokens(config, model, rates) / rates.generate_tokens_per_s_per_gpu
    return ModelFigures(
        model=model, rates=rates, lengths=lengths, micro_batch_size=train["micro_batch_size"], rank_rows=rank_rows,
        step_rows=step_rows, trim=train.get("trim_padding", True),  # the trainer's defaults (balagg.train.trainer)
        sort=train.get("length_sorted_microbatches", True), logprob_pass=logprob_pass(train),
        eval_job_hours=eval_seconds / generate_gpus / 3600,
        generate_runtime_hours=grid.resource(model, "generate_resources", "runtime") / 60,
        train_ranks=train_gpus, train_mem_bytes=grid.resource(model, "train_resources", "mem_mb") * 1e6,
        checkpoints=checkpoints, keep_checkpoints=train["keep_checkpoints"],
        resumable_saves=math.ceil(train["total_steps"] / train["save_every"]),
        keep_resumable_state=train["keep_resumable_state"], **gpu_memory(config, grid, model, rates, train))


def distribution(train: dict, gpus: int) -> tuple[bool, int, str]:
    """How a train job of ``gpus`` GPUs holds its state: (sharded, reduce dtype bytes, description), from the
    cell's accelerate config as the launcher runs it (balagg.train.launch: none and one GPU, the launcher's
    own process; none and several, DDP; an FSDP2 config with balagg's precision policy, balagg.train.precision)."""
    from balagg.train.precision import DTYPE_NAMES, policy_settings

    compute = 2 if train["bf16"] else 4
    config_file = train.get("accelerate_config")
    if config_file is None:
        return False, 4, "one process" if gpus <= 1 else f"DDP over {gpus}"
    import yaml

    if not Path(config_file).is_file():
        raise ValueError(f"accelerate config {config_file} does not exist")
    kind = str((yaml.safe_load(Path(config_file).read_text()) or {}).get("distributed_type", "")).upper()
    if kind != "FSDP":
        return False, 4, f"{kind or 'DDP'} over {gpus}"
    policy = policy_settings(config_file)
    reduce = compute if policy is None else (2 if DTYPE_NAMES[policy["reduce_dtype"]] != "float32" else 4)
    return True, reduce, f"FSDP2 over {gpus}, reduce in {'fp32' if reduce == 4 else 'bf16'}"


def gpu_memory(config: dict, grid: Grid, model: str, rates: Rates, train: dict) -> dict:
    """The :class:`ModelFigures` fields of GPU memory (balagg.train.memory) for ``model``'s train and
    evaluation jobs; a note says why where they are not estimated."""
    from balagg.evaluation.generation.requests import GenerationConfig

    shape = rates.shape
    gpus = grid.resource(model, "train_resources", "gpus")
    if shape is None:
        return {"memory_note": f"not estimated (set plan.models.{model}.shape)"}
    if gpus < 1:
        return {"memory_note": "not estimated (a CPU train job: train_resources.gpus is 0)"}
    try:
        sharded, reduce_bytes, note = distribution(train, gpus)
    except ValueError as error:
        return {"memory_note": f"not estimated ({error})"}
    colocated = train["use_vllm"] and train["vllm_mode"] == "colocate"
    share = train["vllm_gpu_memory_utilization"] if colocated else None
    gpu_gb = grid.resource(model, "train_resources", "gpu_memory_gb")
    figures = {"memory_note": note, "train_sequence": train["max_prompt_length"] + train["max_completion_length"],
               "train_memory": train_memory(
                   shape, gpus=gpus, gpu_memory_gb=gpu_gb, micro_batch_size=train["micro_batch_size"],
                   prompt_tokens=train["max_prompt_length"], completion_tokens=train["max_completion_length"],
                   bf16=train["bf16"], reduce_bytes=reduce_bytes, sharded=sharded, engine_share=share,
                   gradient_checkpointing=train["gradient_checkpointing"])}
    if share:
        figures["train_engine"] = eval_memory(shape, gpu_memory_gb=gpu_gb, engine_share=share)
    if grid.resource(model, "generate_resources", "gpus") >= 1:
        engine_share = next(f.default for f in fields(GenerationConfig) if f.name == "gpu_memory_utilization")
        figures["eval_memory"] = eval_memory(shape, gpu_memory_gb=grid.resource(model, "generate_resources",
                                                                                "gpu_memory_gb"),
                                             engine_share=engine_share)
        figures["eval_context"] = config["models"][model].get("max_position_embeddings",
                                                               shape.max_position_embeddings)
    return figures


def plan_lines(campaign) -> tuple[list[Line], Line]:
    """Per-cell and per-model-initial lines, and the total (module docstring), of a loaded campaign
    (:func:`balagg.campaign.load`)."""
    grid = Grid(campaign)
    config = grid.config
    lines = []
    for model in grid.models:
        figures = model_figures(grid, model)
        rates, train = figures.rates, grid.full_train_settings(model)
        train_gpus = grid.resource(model, "train_resources", "gpus")
        generate_gpus = grid.resource(model, "generate_resources", "gpus")
        runtime = grid.resource(model, "train_resources", "runtime")  # the train job's limit, its default included
        per_checkpoint = per_checkpoint_eval_tokens(config, model, rates)
        rollouts = math.ceil(train["total_steps"] / (train["mini_batches"] * train["num_iterations"]))
        responses = rollouts * train["prompts_per_step"] * train["num_generations"]
        train_tokens = responses * figures.lengths.mean
        logprob_tokens = (responses * (rates.prompt_tokens + figures.logprob_completion_width)
                          if figures.logprob_pass else 0.0)
        eval_hours = per_checkpoint / rates.generate_tokens_per_s_per_gpu / 3600
        snapshot = None if rates.parameters is None else rates.parameters * EVAL_BYTES_PER_PARAMETER
        lines.append(Line(f"{model}/initial (step 0)", {"generate": 1, "score": 1}, 0, generate_gpus,
                          eval_tokens=per_checkpoint, eval_gpu_hours=eval_hours, disk_bytes=snapshot,
                          kept_bytes=snapshot))
        for cell in (cell for cell in grid.cells if cell.model == model):
            padded_tokens = responses * (rates.prompt_tokens + figures.completion_width(cell.aggregator))
            compute_hours = (train_tokens / rates.rollout_tokens_per_s_per_gpu
                             + (padded_tokens * train["num_iterations"] + logprob_tokens * FORWARD_SHARE)
                             / rates.forward_backward_tokens_per_s_per_gpu) / 3600
            wall, save_hours = train_wall(figures, compute_hours / max(train_gpus, 1), runtime / 60 if runtime else None)
            lines.append(Line(
                cell.relpath, {"train": 1, "generate": figures.checkpoints, "score": figures.checkpoints},
                train_gpus, generate_gpus, train_tokens=train_tokens, padded_tokens=padded_tokens,
                eval_tokens=figures.checkpoints * per_checkpoint,
                train_gpu_hours=compute_hours + save_hours * max(train_gpus, 1),
                eval_gpu_hours=figures.checkpoints * eval_hours, train_wall_hours=wall, save_hours=save_hours,
                train_runtime_hours=runtime / 60 if runtime else None, disk_bytes=figures.cell_disk_bytes,
                kept_bytes=figures.kept_bytes))
    total = Line("total", {"prepare_data": len(grid.data_files())})
    for line in lines:
        total.add(line)
    return lines, total


def train_wall(figures: ModelFigures, compute_hours: float, limit_hours: float | None) -> tuple[float, float]:
    """A cell's train wall hours and the part of them spent saving: the compute, its scheduled saves and
    evaluation checkpoints, and one resumable save more for each job that stops at its time limit."""
    wall = compute_hours + figures.save_hours()
    stops = max(math.ceil(wall / limit_hours) - 1, 0) if limit_hours else 0
    save_hours = figures.save_hours(stops)
    return compute_hours + save_hours, save_hours


def _tokens(value: float) -> str:
    for unit, size in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if value >= size:
            return f"{value / size:.2f}{unit}"
    return f"{value:.0f}"


def _gigabytes(value: float | None) -> str:
    return "-" if value is None else f"{value / 1e9:,.1f}"


def _width_note(figures: ModelFigures) -> str:
    """The expected micro-batch widths (prompt + completion tokens per row) of the module docstring."""
    prompt, m = figures.rates.prompt_tokens, figures.micro_batch_size
    untrimmed = (f"{prompt} + {figures.untrimmed_width:,.0f} (the longest of a GPU's {figures.rank_rows} "
                 "rollout rows)")
    logprob = ("no log-prob forward pass" if not figures.logprob_pass else
               f"log-prob pass {prompt} + {figures.logprob_completion_width:,.0f}")
    if not figures.trim:
        return f"micro-batch width (trim_padding: false): every micro-batch {untrimmed}; {logprob}"
    sorted_width = figures.lengths.expected_sorted_width(figures.step_rows, m)
    unsorted = f"{prompt} + {figures.unsorted_width:,.0f} (expected longest of {m})"
    if figures.sort:
        trained = (f"a step's rows ({figures.step_rows} per GPU) sorted by width: {prompt} + {sorted_width:,.0f} = "
                   f"{prompt + sorted_width:,.0f} tokens; the micro-batch rules, unsorted: {unsorted}")
    else:
        trained = f"unsorted (length_sorted_microbatches: false): {unsorted}"
    return (f"micro-batch width (trimmed, {m} rows): {trained}; untrimmed {untrimmed}; {logprob} (a GPU's "
            "rollout rows sorted)")


def _gib(value: float) -> str:
    return f"{value / GIB:.1f}"


def _terms(terms) -> str:
    return " + ".join(f"{term.name} {_gib(term.bytes)}" for term in terms if term.bytes)


def _train_memory_notes(figures: ModelFigures) -> list[str]:
    """The train job's GPU, term by term (balagg.train.memory), OVER under :data:`FREE_GPU_SHARE` free."""
    memory = figures.train_memory
    if memory is None:
        return [f"    train job GPU memory: {figures.memory_note}"]
    peak = memory.peak_phase
    over = " OVER" if memory.free_share < FREE_GPU_SHARE else ""
    notes = [f"    train job GPU memory ({memory.total / GIB:.1f} GiB usable; {figures.memory_note}; the widest "
             f"micro-batch {figures.micro_batch_size} x {figures.train_sequence:,} tokens): peak "
             f"{_gib(memory.peak)} GiB in the {peak}, {memory.free_share:.1%} free{over}",
             f"      held all run (GiB): {_terms(memory.persistent)}",
             f"      {peak}: {_terms(memory.phases[peak])} + allocator slack {_gib(memory.slack)}",
             "      other phases: " + ", ".join(f"{name} {_gib(memory.phase_bytes(name))}" for name in memory.phases
                                               if name != peak) + " GiB"]
    engine = figures.train_engine
    if engine is not None:
        sequences = engine.kv_tokens / figures.train_sequence
        short = " OVER" if sequences < 1 else ""
        notes.append(f"      the engine's {_gib(engine.engine)} GiB: weights {_gib(engine.weights)} + activations "
                     f"{_gib(engine.activations)} + KV cache {_gib(engine.kv_cache)} ({_tokens(engine.kv_tokens)} "
                     f"tokens, {sequences:.0f} sequences of {figures.train_sequence:,}){short}")
    return notes


def _eval_memory_note(figures: ModelFigures) -> str | None:
    """The evaluation job's GPU: OVER when its engine cannot hold one sequence of its length."""
    engine = figures.eval_memory
    if engine is None:
        return None
    context = figures.eval_context
    fits = engine.kv_tokens >= (context or 1) and engine.free > 0
    length = f", {engine.kv_tokens / context:.0f} sequences of its context {context:,}" if context else ""
    return (f"    evaluation job GPU memory ({engine.total / GIB:.1f} GiB usable): the engine's {engine.share:g} = "
            f"{_gib(engine.engine)} GiB: weights {_gib(engine.weights)} + activations {_gib(engine.activations)} + "
            f"KV cache {_gib(engine.kv_cache)} ({_tokens(engine.kv_tokens)} tokens{length}); CUDA context and "
            f"graphs {_gib(engine.outside)} outside it; {_gib(engine.free)} GiB free" + ("" if fits else " OVER"))


def _model_notes(figures: ModelFigures) -> list[str]:
    """The per-model assumptions and derived figures printed under the table."""
    rates, lengths = figures.rates, figures.lengths
    notes = [
        f"  {figures.model}: completion_fraction {rates.completion_fraction} of {lengths.max_length} "
        f"({lengths.truncated_share:.1%} truncated under the length model); rates per GPU: forward+backward "
        f"{rates.forward_backward_tokens_per_s_per_gpu:g} padded tokens/s, rollout "
        f"{rates.rollout_tokens_per_s_per_gpu:g} and generate {rates.generate_tokens_per_s_per_gpu:g} sampled tokens/s",
        "    " + _width_note(figures),
    ]
    over = " OVER" if figures.eval_job_hours > figures.generate_runtime_hours else ""
    notes.append(f"    evaluation job: {figures.eval_job_hours:.2f} h at the generate rate "
                 f"(limit {figures.generate_runtime_hours:g} h, generate_resources.runtime){over}")
    notes += _train_memory_notes(figures)
    eval_note = _eval_memory_note(figures)
    if eval_note:
        notes.append(eval_note)
    if figures.rates.parameters is None:
        notes.append(f"    disk, save time and host memory: not estimated (set plan.models.{figures.model}.parameters "
                     "or its shape)")
        return notes
    parameters = figures.rates.parameters
    notes.append(f"    checkpoints ({parameters / 1e9:.2f}G parameters): {figures.checkpoints} eval x "
                 f"{_gigabytes(figures.eval_checkpoint_bytes)} GB (bf16) + ({figures.keep_checkpoints} kept + 1 "
                 f"while saving) x {_gigabytes(figures.state_bytes)} GB resumable (fp32 weights + AdamW) = "
                 f"{_gigabytes(figures.cell_disk_bytes)} GB per cell at its peak; after training "
                 f"{_gigabytes(figures.kept_bytes)} GB stays (" + ("the evaluation checkpoints and the "
                 "resumable ones: keep_resumable_state)" if figures.keep_resumable_state else
                 "the evaluation checkpoints; the resumable state is removed)"))
    rate = rates.write_bytes_per_s
    notes.append(f"    checkpoint saves at {rate / 1e6:g} MB/s (plan write_bytes_per_s): a resumable one "
                 f"{figures.resumable_save_hours * 60:.1f} min x {figures.resumable_saves} scheduled (save_every) "
                 f"+ one per job stopped at its limit, an evaluation one {figures.eval_save_hours * 60:.1f} min x "
                 f"{figures.checkpoints}; in the train wall hours")
    short = " SHORT" if figures.train_host_bytes > figures.train_mem_bytes else ""
    notes.append(f"    train job host memory (load path): {figures.train_ranks} ranks x ({parameters / 1e9:.2f}G x "
                 f"{LOAD_BYTES_PER_PARAMETER} B + {HOST_BYTES_PER_RANK / 1e9:g} GB) = "
                 f"{_gigabytes(figures.train_host_bytes)} GB; train_resources.mem_mb asks "
                 f"{_gigabytes(figures.train_mem_bytes)} GB{short}")
    return notes


def format_plan(campaign) -> str:
    """The plan of a loaded campaign as a text table with its assumptions (what ``python -m balagg plan``
    prints)."""
    lines, total = plan_lines(campaign)
    grid = Grid(campaign)
    config = grid.config
    every_model = [model_figures(grid, model) for model in config["models"]]
    width = max(len(line.name) for line in [*lines, total])
    header = (f"{'cell':<{width}}  {'jobs (train/gen/score)':>22}  {'GPUs train/gen':>14}  "
              f"{'train tokens gen/padded':>23}  {'eval tokens':>11}  {'train GPU-h':>11}  {'eval GPU-h':>10}  "
              f"{'train wall h (limit)':>20}  {'saves h':>7}  {'disk GB peak/kept':>17}")
    out = [header, "-" * len(header)]
    for line in [*lines, total]:
        jobs = "/".join(str(line.jobs.get(k, 0)) for k in ("train", "generate", "score"))
        gpus = f"{line.train_gpus}/{line.generate_gpus}" if line is not total else ""
        tokens = f"{_tokens(line.train_tokens)}/{_tokens(line.padded_tokens)}" if line.train_tokens else "0"
        wall = ""
        if line.train_wall_hours and line.train_gpus:
            limit = f"{line.train_runtime_hours:.0f}" if line.train_runtime_hours else "-"
            over = " OVER" if line.train_runtime_hours and line.train_wall_hours > line.train_runtime_hours else ""
            wall = f"{line.train_wall_hours:.1f} ({limit}){over}"
        out.append(f"{line.name:<{width}}  {jobs:>22}  {gpus:>14}  {tokens:>23}  "
                   f"{_tokens(line.eval_tokens):>11}  {line.train_gpu_hours:>11.1f}  {line.eval_gpu_hours:>10.1f}  "
                   f"{wall:>20}  {line.save_hours:>7.1f}  "
                   f"{_gigabytes(line.disk_bytes) + '/' + _gigabytes(line.kept_bytes):>17}")
    out.append(f"total GPU-hours: {total.train_gpu_hours + total.eval_gpu_hours:.1f} "
               f"(training {total.train_gpu_hours:.1f}, evaluation {total.eval_gpu_hours:.1f}); "
               f"plus {total.jobs['prepare_data']} data jobs, CPU scoring and the analysis")
    out.append(f"total disk: {_gigabytes(total.disk_bytes)} GB at the peak (every cell at its peak, plus each "
               f"model's hub snapshot); {_gigabytes(total.kept_bytes)} GB stays after training (the evaluation "
               "checkpoints and the snapshots; a cell's resumable state is removed once its training is complete)")
    if config.get("checkpoints"):
        out.append(f"not costed: {len(config['checkpoints'])} external checkpoint(s) (checkpoints:), one generate "
                   "and one score job per step each, with their generate_resources (docs/checkpoints.md)")
    if any(line.train_runtime_hours and line.train_wall_hours > line.train_runtime_hours for line in lines):
        out.append("OVER: a train job outlasts its runtime limit (train_resources.runtime); it needs resumed jobs")
    if any(f.eval_job_hours > f.generate_runtime_hours for f in every_model):
        out.append("OVER: an evaluation job outlasts generate_resources.runtime: raise it")
    if any(f.train_host_bytes is not None and f.train_host_bytes > f.train_mem_bytes for f in every_model):
        out.append("SHORT: train_resources.mem_mb is below the load path's host memory")
    if any(f.train_memory is not None and f.train_memory.free_share < FREE_GPU_SHARE for f in every_model):
        out.append(f"OVER: a train job's GPU keeps under {FREE_GPU_SHARE:.0%} of its memory free (balagg.train.memory): "
                   "lower micro_batch_size or vllm_gpu_memory_utilization, or use more GPUs")
    if any(f.eval_memory is not None and _eval_memory_note(f).endswith("OVER") for f in every_model):
        out.append("OVER: an evaluation engine's KV cache cannot hold one sequence of its context")
    out.append("assumptions (plan section; balagg.plan): train GPU-h = generated tokens / rollout rate + (padded "
               f"tokens x iterations + log-prob pass tokens / 4) / forward+backward rate; forward+backward = "
               f"{'/'.join(MEASURED_RATE)} (bench/gpu_smoke.sh); train wall h = train GPU-h / GPUs + the saves' "
               "time (bytes / write_bytes_per_s); eval GPU-h = tokens / generate rate; disk: eval checkpoints "
               "2 B/parameter, resumable state 12 B/parameter; GPU memory: balagg.train.memory, GPUs of "
               "train_resources.gpu_memory_gb / generate_resources.gpu_memory_gb")
    for figures in every_model:
        out += _model_notes(figures)
    sizes = {model: bench_problems(config, model) for model in config["models"]}
    if len({tuple(size.items()) for size in sizes.values()}) == 1:
        sizes = {"": next(iter(sizes.values()))}
    for model, size in sizes.items():
        label = f" ({model})" if model else ""
        out.append(f"  benchmark problems{label}: " + ", ".join(f"{k} {v}" for k, v in size.items()))
    return "\n".join(out)
