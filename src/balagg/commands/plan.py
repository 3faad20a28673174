"""``python -m balagg plan``: what a campaign will cost before it runs (balagg.plan).

Reads the same config files as ``snakemake --configfile`` (later files override earlier ones key by key,
as Snakemake merges them), loads them as the workflow does (:func:`balagg.campaign.load`: validated, every
default filled in) and prints, per cell and in total, the jobs, GPUs per job, the tokens expected to be
generated in training and evaluation, the GPU-hours at the ``plan`` section's stated tokens/s per GPU, the
checkpoint saves' time and the disk at its peak and after training; per model, the per-GPU memory of a
train and an evaluation job, term by term.
"""

from __future__ import annotations

import argparse


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("plan", help="jobs, GPUs, tokens and GPU-hours of a campaign, before running it",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--configfile", nargs="+", required=True, help="config files, merged in order")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from balagg.campaign import load
    from balagg.plan import format_plan

    campaign = load(args.configfile)
    print(f"plan for campaign {campaign.campaign} ({' + '.join(args.configfile)})")
    print(format_plan(campaign))
    return 0
