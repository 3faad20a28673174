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
    from balagg.config_flags import add_config_arguments
    from balagg.evaluation.generation.requests import GenerationConfig

    parser = subparsers.add_parser(
        "generate", help="sample n answers per benchmark problem from a checkpoint",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", required=True, action="append",
                        help="HF model folder (model + tokenizer); repeat with --out for several checkpoints")
    parser.add_argument("--benchmarks-dir", required=True, help="folder with {benchmark}.jsonl files")
    parser.add_argument("--benchmarks", required=True, help="comma-separated names, e.g. math500,aime24")
    parser.add_argument("--out", required=True, action="append", help="output folder (one per --checkpoint)")
    add_config_arguments(parser.add_argument_group("generation settings (GenerationConfig)"), GenerationConfig)
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
    from balagg.config_flags import config_from_args
    from balagg.evaluation.generation.generate import generate
    from balagg.evaluation.generation.requests import GenerationConfig

    config = config_from_args(GenerationConfig, args, math_template=_template(args.math_template),
                              code_template=_template(args.code_template))
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
