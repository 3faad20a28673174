"""``python -m balagg tinyworld``: build the embedded default's tiny world.

  tinyworld data   synthetic training sets and benchmarks in the real datasets' raw schemas and
                   file layouts, plus manifest.json (balagg.tinyworld.raw)
  tinyworld model  a random-init tiny Qwen2 of a named size, warm-started by a short supervised run,
                   saved with save_pretrained, and its step-0 data card card.json (written last)
  tinyworld card   merge the models' card.json files into the campaign's data card (one log line
                   per model)
  tinyworld hub-cache  tiny random models of the real architectures and tiny-world datasets under a
                   config's hub ids, in huggingface_hub's cache layout (the rehearsal's hub)

Examples:
  python -m balagg tinyworld data --out results/default/tinyworld/raw --seed 0
  python -m balagg tinyworld model --size tiny-s --raw results/default/tinyworld/raw --out results/default/models/tiny-s
  python -m balagg tinyworld card --cards results/default/models/*/card.json --out results/default/data/card.json
  python -m balagg tinyworld hub-cache --hf-home /tmp/hf --configfile configs/paper.yaml configs/rehearsal.yaml
"""

from __future__ import annotations

import argparse

from balagg import settings
from balagg.layout import TINYWORLD_DEFAULT_FAMILY, TINYWORLD_FAMILIES
from balagg.prompts import ANSWER_FORMATS, DEFAULT_ANSWER_FORMAT


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text}")
    return value


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "tinyworld",
        help="build the tiny world: synthetic raw datasets, warm-started tiny models and their data cards",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)

    data = actions.add_parser("data", help="write the synthetic raw datasets and manifest.json")
    data.add_argument("--out", required=True, help="folder for the raw datasets (one subfolder each)")
    data.add_argument("--seed", type=int, default=settings.TINYWORLD.seed)
    data.add_argument("--train-problems", type=_positive, default=settings.TINYWORLD.train_problems,
                      help="problems per training set")
    data.add_argument("--bench-problems", type=_positive, default=settings.TINYWORLD.bench_problems,
                      help="problems per benchmark")
    data.add_argument("--family", choices=TINYWORLD_FAMILIES, default=TINYWORLD_DEFAULT_FAMILY,
                      help="task family of the training sets and math benchmarks (balagg.tinyworld.raw.FAMILIES)")
    data.set_defaults(func=run_data)

    model = actions.add_parser("model", help="build, warm-start and save a tiny model with its card.json")
    model.add_argument("--size", required=True, help="tiny-xs, tiny-s, tiny-m or tiny-l")
    model.add_argument("--raw", "--train-data", dest="raw", required=True,
                       help="the raw folder written by `tinyworld data` (its training sets give the card)")
    model.add_argument("--out", required=True, help="checkpoint folder (replaced); card.json is written last")
    model.add_argument("--seed", type=int, default=settings.TINYWORLD.seed,
                       help="seed of the initial weights and the warm start")
    model.add_argument("--sft-steps", type=_positive, default=settings.TINYWORLD.sft_steps,
                       help="warm-start optimiser steps (batch 32)")
    model.add_argument("--sft-length-buckets", type=_positive, default=settings.TINYWORLD.sft_length_buckets,
                       help="pad each warm-start batch in this many length-sorted parts (the same update, less padding)")
    model.add_argument("--card-problems", type=_positive, default=64, help="problems per training set in the card")
    model.add_argument("--card-samples", type=_positive, default=8, help="samples per problem in the card")
    model.add_argument("--max-new-tokens", type=_positive, default=96)
    model.add_argument("--answer-format", choices=ANSWER_FORMATS, default=DEFAULT_ANSWER_FORMAT,
                       help="how the card's step-0 answers are read (the model's answer_format, as in training)")
    model.add_argument("--regime", default=None,
                       help="laboratory length regime of the warm start (balagg.tinyworld.regimes; default: the "
                            "embedded default's mix)")
    model.set_defaults(func=run_model)

    hub = actions.add_parser("hub-cache", help="tiny stand-ins for a config's hub models and datasets, in a hub cache")
    hub.add_argument("--hf-home", required=True, help="HF_HOME to fill (snapshots under {hf-home}/hub)")
    hub.add_argument("--configfile", nargs="+", required=True,
                     help="campaign config(s), later ones layered on earlier ones as Snakemake does")
    hub.add_argument("--seed", type=int, default=0)
    hub.add_argument("--train-problems", type=_positive, default=16, help="problems per training set")
    hub.add_argument("--bench-problems", type=_positive, default=2, help="problems per benchmark")
    hub.set_defaults(func=run_hub_cache)

    card = actions.add_parser("card", help="merge per-model card.json files into one data card")
    card.add_argument("--cards", nargs="+", required=True, help="the models' card.json files")
    card.add_argument("--out", required=True, help="the merged data card (JSON)")
    card.add_argument("--data-reports", nargs="*", default=[],
                      help="prepare-data reports (--report): their bad-row counts go into the card")
    card.set_defaults(func=run_card)


def run_data(args: argparse.Namespace) -> int:
    from balagg.tinyworld.raw import write_raw

    manifest = write_raw(args.out, args.seed, train_problems=args.train_problems, bench_problems=args.bench_problems,
                         family=args.family)
    rows = ", ".join(f"{name} {d['rows']}" for name, d in manifest["datasets"].items())
    print(f"tinyworld data ({args.family}, seed {args.seed}) in {args.out}: {rows}")
    return 0


def run_model(args: argparse.Namespace) -> int:
    from balagg.tinyworld.model import SIZES
    from balagg.tinyworld.warmstart import WarmStartConfig, build_warm_model, summary_line

    if args.size not in SIZES:
        raise ValueError(f"unknown tiny model size {args.size!r}; choose one of {', '.join(SIZES)}")
    card = build_warm_model(args.size, args.raw, args.out, seed=args.seed,
                            config=WarmStartConfig(steps=args.sft_steps, seed=args.seed, regime=args.regime,
                                                   length_buckets=args.sft_length_buckets),
                            card_problems=args.card_problems, samples_per_problem=args.card_samples,
                            max_new_tokens=args.max_new_tokens, answer_format=args.answer_format)
    print(summary_line(args.size, card))
    return 0


def run_card(args: argparse.Namespace) -> int:
    from balagg.tinyworld.warmstart import merge_cards, summary_line

    merged = merge_cards(args.cards, args.out, args.data_reports)
    for name, card in merged["models"].items():
        print(summary_line(name, card))
    for name, bad in merged["bad_rows"].items():
        if bad["skipped"]:
            print(f"{name}: {bad['skipped']} bad row(s) of {bad['rows_read']} skipped")
    print(f"tinyworld data card {args.out}: step-0 regime met over the grid: {merged['regime_met']}")
    return 0


def run_hub_cache(args: argparse.Namespace) -> int:
    from balagg.campaign import load
    from balagg.tinyworld.hubcache import campaign_repos, fill_hub_cache

    models, datasets = campaign_repos(load(args.configfile).config)
    commits = fill_hub_cache(args.hf_home, models, datasets, seed=args.seed, train_problems=args.train_problems,
                             bench_problems=args.bench_problems)
    for repo_id, commit in commits.items():
        print(f"{repo_id} {commit}")
    return 0
