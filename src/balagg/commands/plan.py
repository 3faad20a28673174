"""``python -m balagg plan``: what a campaign will cost before it runs (balagg.plan).

Reads the same config files as ``snakemake --configfile`` (later files override earlier ones key by key,
as Snakemake merges them), validates them against the workflow's schema and prints, per cell and in
total, the jobs, GPUs per job, the tokens expected to be generated in training and evaluation, the
GPU-hours at the ``plan`` section's stated tokens/s per GPU, the checkpoint saves' time and the disk at its
peak and after training; per model, the per-GPU memory of a train and an evaluation job, term by term.
"""

from __future__ import annotations

import argparse
from pathlib import Path

SCHEMA = Path(__file__).resolve().parents[3] / "workflow" / "schemas" / "config.schema.yaml"


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("plan", help="jobs, GPUs, tokens and GPU-hours of a campaign, before running it",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--configfile", nargs="+", required=True, help="config files, merged in order")
    parser.add_argument("--schema", default=str(SCHEMA), help="workflow config schema (default: %(default)s)")
    parser.set_defaults(func=run)


def load_config(paths: list[str], schema: str | Path = SCHEMA) -> dict:
    """The merged, validated config with the schema's defaults filled in, as the workflow sees it."""
    from snakemake.utils import validate

    from balagg.configfiles import merged_config

    config = merged_config(paths)
    if not Path(schema).is_file():
        raise ValueError(f"schema {schema} does not exist")
    try:
        validate(config, str(schema), set_default=True)
    except Exception as error:  # snakemake's WorkflowError: "ValidationError: ..." and "On instance[...]"
        lines = [line.strip() for line in str(error).splitlines() if line.strip()]
        reason = next((line.removeprefix("ValidationError: ") for line in lines if line.startswith("ValidationError")),
                      lines[0] if lines else type(error).__name__)
        where = next((line.removeprefix("On ").rstrip(":") for line in lines if line.startswith("On instance")), "")
        raise ValueError(f"{' + '.join(paths)}: {reason}" + (f" at {where}" if where else "")) from None
    return config


def run(args: argparse.Namespace) -> int:
    from balagg.plan import format_plan

    config = load_config(args.configfile, args.schema)
    print(f"plan for campaign {config['campaign']} ({' + '.join(args.configfile)})")
    print(format_plan(config))
    return 0
