"""``python -m balagg generate``: n samples per problem of each benchmark from one checkpoint.

Reads ``{benchmarks-dir}/{name}.jsonl`` (written by ``prepare-data``) and writes
``{out}/generations.jsonl`` (one line per problem and sample, docs/files.md) and ``{out}/generation.json``
(settings, backend, versions). The model is loaded once for all benchmarks. A rerun with the same
settings resumes after the last completed benchmark.
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
    parser.add_argument("--checkpoint", required=True, help="HF model folder (model + tokenizer)")
    parser.add_argument("--benchmarks-dir", required=True, help="folder with {benchmark}.jsonl files")
    parser.add_argument("--benchmarks", required=True, help="comma-separated names, e.g. math500,aime24")
    parser.add_argument("--out", required=True, help="output folder")
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
    summary = generate(args.checkpoint, args.benchmarks_dir, benchmarks, args.out, config)
    print(json.dumps({"out": summary.out, "backend": summary.backend, "samples": summary.benchmarks,
                      "seconds": round(summary.seconds, 1)}))
    return 0

