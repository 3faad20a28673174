"""A campaign's cost before it runs: jobs, GPUs, tokens generated and GPU-hours, per cell and in total.

Everything follows from the workflow config (the merged ``--configfile`` files) and the ``plan`` section's
stated assumptions; nothing is measured here. Per cell (model x dataset x aggregator x seed):

    rollout batches   R = ceil(total_steps / (mini_batches * num_iterations))
    train tokens      T = R * prompts_per_step * num_generations * f * max_completion_length
    eval checkpoints  K = the trained checkpoints (every eval_every and the last; step 0 is the model's)
    eval tokens       E = K * n * (sum of problems over the benchmarks) * f * eval.max_tokens
    GPU-hours         T / v_train / 3600   and   E / v_generate / 3600
    wall hours        GPU-hours / GPUs per job (train: one job; evaluation: per checkpoint job)

``f`` (``completion_fraction``) is the expected completion length as a fraction of the maximum, ``v`` the
tokens generated per second per GPU: for a train job all its work (rollouts, log-probs, backward,
optimiser) divided by the tokens it generates; for a generate job the sampling rate. Each model's step 0
is evaluated once (``initial``). ``bench_problems`` gives a benchmark's size where the data registry
has none (LiveCodeBench's window) or to plan a subset.
"""

from __future__ import annotations

import math
from dataclasses import MISSING, dataclass, fields

from balagg import contract
from balagg.data.sources import SOURCES
from balagg.train.config import CellConfig


@dataclass(frozen=True)
class Rates:
    """The stated assumptions for one model (``plan`` section, ``plan.models.<name>`` overriding)."""

    completion_fraction: float = 0.5
    train_tokens_per_s_per_gpu: float = 1000.0
    generate_tokens_per_s_per_gpu: float = 5000.0


@dataclass
class Line:
    """One row of the plan: a cell, a model's initial evaluation, or the total."""

    name: str
    jobs: dict[str, int]
    train_gpus: int = 0
    generate_gpus: int = 0
    train_tokens: float = 0.0
    eval_tokens: float = 0.0
    train_gpu_hours: float = 0.0
    eval_gpu_hours: float = 0.0
    train_wall_hours: float = 0.0  # one train job
    train_runtime_hours: float | None = None  # the job's configured limit

    def add(self, other: Line) -> None:
        for key, count in other.jobs.items():
            self.jobs[key] = self.jobs.get(key, 0) + count
        for name in ("train_tokens", "eval_tokens", "train_gpu_hours", "eval_gpu_hours"):
            setattr(self, name, getattr(self, name) + getattr(other, name))


def model_rates(config: dict, model: str) -> Rates:
    plan = config.get("plan", {})
    known = {f.name for f in fields(Rates)}
    unknown = sorted(set(plan.get("models", {})) - set(config["models"]))
    if unknown:
        raise ValueError(f"plan.models names models that are not in the config: {unknown}")
    values = {k: v for k, v in plan.items() if k in known} | plan.get("models", {}).get(model, {})
    rates = Rates(**values)
    if not 0 < rates.completion_fraction <= 1:
        raise ValueError(f"plan: completion_fraction of {model} must be in (0, 1], got {rates.completion_fraction}")
    if rates.train_tokens_per_s_per_gpu <= 0 or rates.generate_tokens_per_s_per_gpu <= 0:
        raise ValueError(f"plan: tokens per second of {model} must be positive")
    return rates


def bench_problems(config: dict, model: str | None = None) -> dict[str, int]:
    """Problems per configured benchmark that ``model`` (default: the first) is evaluated on:
    ``plan.bench_problems``, the tiny world's size in the model's task family, or the registry's."""
    from balagg.tinyworld.raw import bench_size
    from balagg.tinyworld.regimes import model_family

    given = config.get("plan", {}).get("bench_problems", {})
    family = model_family(config["models"][model or next(iter(config["models"]))])
    asked = config.get("tinyworld", {}).get("bench_problems", contract.TINYWORLD.bench_problems)
    sizes = {}
    for name, source in config["benchmarks"].items():
        if name in given:
            sizes[name] = given[name]
        elif source == contract.TINYWORLD_SOURCE:
            sizes[name] = bench_size(family, name, asked)
        elif SOURCES[name].expected_rows is not None:
            sizes[name] = SOURCES[name].expected_rows
        else:
            raise ValueError(f"plan: benchmark {name} has no known size; set plan.bench_problems.{name}")
    return sizes


def _train_settings(config: dict, model: str) -> dict:
    defaults = {f.name: f.default for f in fields(CellConfig) if f.default is not MISSING}
    return {**defaults, **config["train"], **config["models"][model].get("train", {})}


def _resources(config: dict, model: str, key: str) -> dict:
    return config["models"][model].get(key, {})


def _prepare_jobs(config: dict) -> int:
    """Data jobs: one per training set and benchmark, a tiny-world one once per task family in use."""
    from balagg.tinyworld.regimes import model_family

    families = {model_family(spec) for spec in config["models"].values()}
    sources = [spec["source"] for spec in config["datasets"].values()] + list(config["benchmarks"].values())
    return sum(len(families) if source == contract.TINYWORLD_SOURCE else 1 for source in sources)


def plan_lines(config: dict) -> tuple[list[Line], Line]:
    """Per-cell and per-model-initial lines, and the total (module docstring)."""
    evaluation = config.get("eval", {})
    n, eval_max = evaluation.get("n", 8), evaluation.get("max_tokens", 8192)
    lines = []
    for model in config["models"]:
        rates = model_rates(config, model)
        problems = sum(bench_problems(config, model).values())
        train = _train_settings(config, model)
        train_gpus = _resources(config, model, "train_resources").get("gpus", 0)
        generate_gpus = _resources(config, model, "generate_resources").get("gpus", 0)
        runtime = _resources(config, model, "train_resources").get("runtime")
        per_checkpoint = n * problems * rates.completion_fraction * eval_max
        steps = CellConfig.checkpoint_steps_of(train["total_steps"], train["eval_every"])
        checkpoints = len([s for s in steps if s > 0])
        cycle = train["mini_batches"] * train["num_iterations"]
        rollouts = math.ceil(train["total_steps"] / cycle)
        train_tokens = (rollouts * train["prompts_per_step"] * train["num_generations"]
                        * rates.completion_fraction * train["max_completion_length"])
        train_hours = train_tokens / rates.train_tokens_per_s_per_gpu / 3600
        eval_hours = per_checkpoint / rates.generate_tokens_per_s_per_gpu / 3600
        lines.append(Line(f"{model}/initial (step 0)", {"generate": 1, "score": 1}, 0, generate_gpus,
                          eval_tokens=per_checkpoint, eval_gpu_hours=eval_hours))
        for dataset in config["datasets"]:
            for aggregator in config["aggregators"]:
                for seed in config["seeds"]:
                    lines.append(Line(
                        f"{model}/{dataset}/{aggregator}/seed{seed}",
                        {"train": 1, "generate": checkpoints, "score": checkpoints}, train_gpus, generate_gpus,
                        train_tokens=train_tokens, eval_tokens=checkpoints * per_checkpoint,
                        train_gpu_hours=train_hours, eval_gpu_hours=checkpoints * eval_hours,
                        train_wall_hours=train_hours / max(train_gpus, 1),
                        train_runtime_hours=runtime / 60 if runtime else None))
    total = Line("total", {"prepare_data": _prepare_jobs(config)})
    for line in lines:
        total.add(line)
    return lines, total


def _tokens(value: float) -> str:
    for unit, size in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if value >= size:
            return f"{value / size:.2f}{unit}"
    return f"{value:.0f}"


def format_plan(config: dict) -> str:
    """The plan as a text table with its assumptions (what ``python -m balagg plan`` prints)."""
    lines, total = plan_lines(config)
    width = max(len(line.name) for line in [*lines, total])
    header = (f"{'cell':<{width}}  {'jobs (train/gen/score)':>22}  {'GPUs train/gen':>14}  {'train tokens':>12}  "
              f"{'eval tokens':>11}  {'train GPU-h':>11}  {'eval GPU-h':>10}  {'train wall h (limit)':>20}")
    out = [header, "-" * len(header)]
    for line in [*lines, total]:
        jobs = "/".join(str(line.jobs.get(k, 0)) for k in ("train", "generate", "score"))
        gpus = f"{line.train_gpus}/{line.generate_gpus}" if line is not total else ""
        wall = ""
        if line.train_wall_hours and line.train_gpus:
            limit = f"{line.train_runtime_hours:.0f}" if line.train_runtime_hours else "-"
            over = " OVER" if line.train_runtime_hours and line.train_wall_hours > line.train_runtime_hours else ""
            wall = f"{line.train_wall_hours:.1f} ({limit}){over}"
        out.append(f"{line.name:<{width}}  {jobs:>22}  {gpus:>14}  {_tokens(line.train_tokens):>12}  "
                   f"{_tokens(line.eval_tokens):>11}  {line.train_gpu_hours:>11.1f}  {line.eval_gpu_hours:>10.1f}  "
                   f"{wall:>20}")
    out.append(f"total GPU-hours: {total.train_gpu_hours + total.eval_gpu_hours:.1f} "
               f"(training {total.train_gpu_hours:.1f}, evaluation {total.eval_gpu_hours:.1f}); "
               f"plus {total.jobs['prepare_data']} data jobs, CPU scoring and the analysis")
    if any(line.train_runtime_hours and line.train_wall_hours > line.train_runtime_hours for line in lines):
        out.append("OVER: a train job outlasts its runtime limit (train_resources.runtime); it needs resumed jobs")
    out.append("assumptions (plan section): expected completion = completion_fraction x max length; "
               "GPU-hours = tokens generated / (tokens/s per GPU) / 3600")
    for model in config["models"]:
        rates = model_rates(config, model)
        out.append(f"  {model}: completion_fraction {rates.completion_fraction}, train "
                   f"{rates.train_tokens_per_s_per_gpu:g} tokens/s/GPU, generate "
                   f"{rates.generate_tokens_per_s_per_gpu:g} tokens/s/GPU")
    sizes = {model: bench_problems(config, model) for model in config["models"]}
    if len({tuple(size.items()) for size in sizes.values()}) == 1:
        sizes = {"": next(iter(sizes.values()))}
    for model, size in sizes.items():
        label = f" ({model})" if model else ""
        out.append(f"  benchmark problems{label}: " + ", ".join(f"{k} {v}" for k, v in size.items()))
    return "\n".join(out)
