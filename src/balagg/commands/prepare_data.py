"""``python -m balagg prepare-data``: normalise one benchmark or training set into its JSONL.

The source is a hub id (needs network) or a local mirror: a data file (.parquet/.jsonl/.json/.csv), a
``save_to_disk`` folder, or a copy of the hub repository. ``--list`` shows the registry.

Examples:
  python -m balagg prepare-data --benchmark math500 --source HuggingFaceH4/MATH-500 --out data/bench/math500.jsonl
  python -m balagg prepare-data --dataset dapo-math-17k --source mirror/dapo-math-17k.parquet --out data/train/dapo-math-17k.jsonl
  python -m balagg prepare-data --benchmark livecodebench --source lcb.parquet --start-date 2025-02-01 --end-date 2025-05-01 --out lcb.jsonl
"""

from __future__ import annotations

import argparse
import json
import sys

from balagg import settings


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "prepare-data",
        help="normalise a benchmark or training set (hub id or local mirror) into JSONL",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--benchmark", help="benchmark name (math500, aime24, ..., livecodebench)")
    which.add_argument("--dataset", help="training set name (dapo-math-17k, polaris-53k)")
    which.add_argument("--list", action="store_true", help="print the registry of sources and exit")
    parser.add_argument("--source", help="hub id or local path (default: the registry's hub id)")
    parser.add_argument("--out", help="output JSONL file")
    parser.add_argument("--on-bad-row", choices=("fail", "skip"), default=settings.DATA.on_bad_row,
                        help="stop at the first malformed row or skip and count it (default %(default)s, as the workflow)")
    parser.add_argument("--report", default=None,
                        help="also write the report (rows read, written, bad rows skipped and why) to this JSON file")
    parser.add_argument("--split", default=None, help="override the registry's split")
    parser.add_argument("--subset", default=None, help="override the registry's subset (config name)")
    parser.add_argument("--start-date", default=None, help="livecodebench: first contest date (inclusive)")
    parser.add_argument("--end-date", default=None, help="livecodebench: last contest date (inclusive)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from balagg.data import SOURCES, prepare
    from balagg.data.prepare import describe_bad_row
    from balagg.data.livecodebench import DEFAULT_WINDOW

    if args.list:
        for source in SOURCES.values():
            subset = f" [{source.subset}]" if source.subset else ""
            size = source.expected_rows if source.expected_rows is not None else "-"
            print(f"{source.name:<15} {source.role:<9} {source.hub_id}{subset} split={source.split} "
                  f"rows={size}  {source.note}".rstrip())
        return 0
    if not args.out:
        raise ValueError("--out is required")
    name = args.benchmark or args.dataset
    role = "benchmark" if args.benchmark else "train"
    options = {}
    if args.start_date or args.end_date:
        if name != "livecodebench":
            raise ValueError("--start-date/--end-date apply to livecodebench only")
        options["window"] = (args.start_date or DEFAULT_WINDOW[0], args.end_date or DEFAULT_WINDOW[1])
    from balagg.data import get_source

    location = args.source or get_source(name, role).hub_id
    report = prepare(name, location, args.out, on_bad_row=args.on_bad_row, split=args.split,
                     subset=args.subset, role=role, **options)
    if args.report:
        from balagg.io import write_json

        write_json(args.report, report.to_dict())
    if report.skipped:
        print(f"{args.out}: skipped {report.skipped} bad row(s) of {report.rows_read} (on_bad_row skip), e.g. "
              f"{describe_bad_row(report.bad_rows[0])}", file=sys.stderr)
    if report.unparsable_golds:
        print(f"{args.out}: {len(report.unparsable_golds)} problem(s) whose gold answer the math verifier cannot "
              f"parse, kept (scored incorrect, counted by `balagg score`): "
              + ", ".join(row["id"] for row in report.unparsable_golds), file=sys.stderr)
    print(json.dumps(report.to_dict(), indent=2))
    return 0
