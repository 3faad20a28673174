"""``python -m balagg generate``: n samples per problem of each benchmark from one checkpoint.

Reads ``{benchmarks-dir}/{name}.jsonl`` (written by ``prepare-data``) and writes
``{out}/generations.jsonl`` (one line per problem and sample, docs/files.md) and ``{out}/generation.json``
(settings, backend, versions). The model is loaded once for all benchmarks. A rerun with the same
settings resumes after the last completed benchmark.

``--checkpoint``/``--out`` may be repeated (pairs, in order): one process then evaluates several
checkpoints, one after the other, paying the start-up (imports) once -- what the workflow's
``eval.jobs: cell`` does. Each pair is exactly the single-checkpoint run.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    from balagg.evaluation.generation.requests import BACKENDS, PROMPT_STYLES, GenerationConfig
    from balagg.prompts import ANSWER_FORMATS

    defaults = GenerationConfig()
    parser = subparsers.add_parser(
        "generate", help="sample n answers per benchmark problem from a checkpoint",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", required=True, action="append",
                        help="HF model folder (model + tokenizer); repeat with --out for several checkpoints")
    parser.add_argument("--benchmarks-dir", required=True, help="folder with {benchmark}.jsonl files")
    parser.add_argument("--benchmarks", required=True, help="comma-separated names, e.g. math500,aime24")
    parser.add_argument("--out", required=True, action="append", help="output folder (one per --checkpoint)")
    parser.add_argument("--n", type=int, default=defaults.n, help="samples per problem (default %(default)s)")
    parser.add_argument("--temperature", type=float, default=defaults.temperature, help="0 = greedy")
    parser.add_argument("--top-p", type=float, default=defaults.top_p)
    parser.add_argument("--top-k", type=int, default=defaults.top_k, help="0 = off")
    parser.add_argument("--max-tokens", type=int, default=defaults.max_tokens, help="new tokens per sample")
    parser.add_argument("--seed", type=int, default=defaults.seed, help="base seed (per-sample seeds derive from it)")
    parser.add_argument("--prompt-style", choices=PROMPT_STYLES, default=defaults.prompt_style,
                        help="chat template, plain template, or auto (chat if the tokenizer has one)")
    parser.add_argument("--system-prompt", default=None, help="system message (chat style)")
    parser.add_argument("--enable-thinking", choices=("true", "false"), default=None,
                        help="chat template's enable_thinking (Qwen3), as the training passes it (default: unset)")
    parser.add_argument("--answer-format", choices=ANSWER_FORMATS, default=defaults.answer_format,
                        help="what the math template asks for; recorded for scoring (balagg.prompts)")
    parser.add_argument("--max-position-embeddings", type=int, default=None,
                        help="context override, the training's (balagg.context); default: the checkpoint's own")
    parser.add_argument("--math-template", default=defaults.math_template,
                        help="user turn for math problems, with {problem}; @FILE reads it from a file")
    parser.add_argument("--code-template", default=defaults.code_template,
                        help="user turn for code problems, with {problem} and {code_instructions}; @FILE reads a file")
    parser.add_argument("--backend", choices=BACKENDS, default=defaults.backend)
    parser.add_argument("--dtype", default=defaults.dtype, help="auto, float32, bfloat16, ...")
    parser.add_argument("--max-model-len", type=int, default=None, help="context length (default: the model's)")
    parser.add_argument("--batch-size", type=int, default=defaults.batch_size, help="transformers backend")
    parser.add_argument("--threads", type=int, default=defaults.num_threads, help="transformers backend")
    parser.add_argument("--kv-cache-bytes", type=int, default=None, help="vLLM KV cache size (CPU default 512 MiB)")
    parser.add_argument("--gpu-memory-utilization", type=float, default=defaults.gpu_memory_utilization)
    parser.add_argument("--tensor-parallel-size", type=int, default=defaults.tensor_parallel_size)
    parser.add_argument("--enforce-eager", action="store_true", help="vLLM: no torch.compile / CUDA graphs")
    parser.set_defaults(func=run)


def _template(value: str) -> str:
    if value.startswith("@"):
        path = Path(value[1:])
        if not path.is_file():
            raise ValueError(f"template file {path} not found")
        return path.read_text()
    return value


def run(args: argparse.Namespace) -> int:
    import json
    import os

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from balagg.evaluation.generation.generate import generate
    from balagg.evaluation.generation.requests import GenerationConfig

    config = GenerationConfig(
        n=args.n, temperature=args.temperature, top_p=args.top_p, top_k=args.top_k, max_tokens=args.max_tokens,
        seed=args.seed, prompt_style=args.prompt_style, system_prompt=args.system_prompt,
        enable_thinking=None if args.enable_thinking is None else args.enable_thinking == "true",
        answer_format=args.answer_format, max_position_embeddings=args.max_position_embeddings,
        math_template=_template(args.math_template), code_template=_template(args.code_template),
        backend=args.backend, dtype=args.dtype, max_model_len=args.max_model_len, batch_size=args.batch_size,
        num_threads=args.threads, kv_cache_memory_bytes=args.kv_cache_bytes,
        gpu_memory_utilization=args.gpu_memory_utilization, tensor_parallel_size=args.tensor_parallel_size,
        enforce_eager=args.enforce_eager)
    benchmarks = [name.strip() for name in args.benchmarks.split(",") if name.strip()]
    for checkpoint, out in checkpoint_pairs(args.checkpoint, args.out):
        summary = generate(checkpoint, args.benchmarks_dir, benchmarks, out, config)
        print(json.dumps({"out": summary.out, "backend": summary.backend, "samples": summary.benchmarks,
                          "seconds": round(summary.seconds, 1)}))
    return 0


def checkpoint_pairs(inputs: list[str], outs: list[str]) -> list[tuple[str, str]]:
    """(input, output folder) pairs of repeated options; counts must match and outputs must differ."""
    if len(inputs) != len(outs):
        raise ValueError(f"{len(inputs)} inputs but {len(outs)} --out folders: give one --out per input")
    if len(set(outs)) != len(outs):
        raise ValueError(f"--out folders repeat: {', '.join(sorted({o for o in outs if outs.count(o) > 1}))}")
    return list(zip(inputs, outs))
