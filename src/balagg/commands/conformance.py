"""``python -m balagg conformance``: does each installed engine's loss aggregation do what its name says?

Runs every aggregation option of each engine it can import (TRL, verl, SkyRL, OpenRLHF, AReaL) through the
engine's own loss code on seeded GRPO batches split into micro-batches, data-parallel ranks (gloo),
padding and packed rows, and names the balagg rule each option equals, its largest deviation from the rule
its name claims, and the invariances that hold (balagg.conformance). Writes conformance.csv, conformance.md
and conformance.png under --out, and prints the table. An engine that is not installed, lacks an option or
changed its loss signature gets one line saying what to do; it is never reported as conforming.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

DEFAULT_OUT = "results/conformance"
DEFAULT_RECORD = "docs/conformance.csv"


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "conformance", help="check which aggregation rule each RL engine's loss options implement",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--engine", default="all",
                        help="comma-separated engines (trl, verl, skyrl, openrlhf, areal; 'fake' is the self-check's "
                             "broken engine), or 'all' (default: every engine, one line for each that is missing), "
                             "or 'none' (only --docs)")
    parser.add_argument("--option", default=None,
                        help="one option of the engine (e.g. loss_agg_mode=token-mean); default: all")
    parser.add_argument("--batches", type=int, default=3, help="seeded batches per option and split (default 3)")
    parser.add_argument("--no-distributed", action="store_true",
                        help="leave out the 2-rank gloo split (data-parallel invariance is then not tested)")
    parser.add_argument("--out", default=DEFAULT_OUT,
                        help=f"folder for conformance.csv/.md/.png (default {DEFAULT_OUT}); rows of engines not run "
                             "this time are kept from the CSV already there")
    parser.add_argument("--record", default=None, metavar="CSV",
                        help=f"also merge this run's rows into CSV (the measured record, e.g. {DEFAULT_RECORD})")
    parser.add_argument("--check", default=None, metavar="CSV",
                        help="fail (exit 1) if an engine measured now equals another rule, conforms differently or "
                             "changes an invariance from the record CSV")
    parser.add_argument("--docs", default=None, metavar="MD",
                        help=f"write the name map page (docs/conformance.md) from the registry and the record "
                             f"(--record, default {DEFAULT_RECORD})")
    parser.set_defaults(func=run)


def _engines(text: str) -> tuple[list[str], bool]:
    from balagg.conformance.engines import ENGINES, NOT_ON_THE_INDEX

    if text == "all":
        return list(ENGINES) + list(NOT_ON_THE_INDEX), False
    if text == "none":
        return [], True
    return [name.strip() for name in text.split(",") if name.strip()], True


def run(args: argparse.Namespace) -> int:
    from balagg.conformance import report
    from balagg.conformance.batches import seeded_batches
    from balagg.conformance.check import check_engine
    from balagg.conformance.engines import EngineUnavailable, adapter

    if args.batches < 1:
        raise ValueError(f"--batches must be at least 1, got {args.batches}")
    names, explicit = _engines(args.engine)
    batches = seeded_batches(args.batches)
    results, unavailable = [], []
    for name in names:
        try:
            engine = adapter(name)
            options = [engine.option(args.option)] if args.option else None
            if options is not None:
                engine.load()
            found = check_engine(engine, batches, options, distributed=not args.no_distributed)
        except EngineUnavailable as error:
            unavailable.append(str(error))
            print(f"not checked: {error}", file=sys.stderr)
            continue
        results += found
        print(f"{name} {engine.version()}: {len(found)} options checked", file=sys.stderr)
    table = report.rows(results)
    out = Path(args.out)
    merged = report.merge(report.read_csv(out / "conformance.csv"), table) if table else report.read_csv(
        out / "conformance.csv")
    if names:
        for path in report.write(merged, unavailable, out):
            print(f"wrote {path}", file=sys.stderr)
        if table:
            print(report.markdown_table(table))
            found = report.findings(table)
            if found:
                print("\nFindings:\n" + "\n".join(found))
    record = Path(args.record or DEFAULT_RECORD)
    if args.record and table:
        from balagg.io import atomic_write_text

        atomic_write_text(record, report.to_csv(report.merge(report.read_csv(record), table)))
        print(f"recorded {len(table)} rows in {record}", file=sys.stderr)
    if args.docs:
        from balagg.conformance.engines import NOT_ON_THE_INDEX
        from balagg.io import atomic_write_text

        recorded = report.read_csv(record)
        if not recorded:
            raise ValueError(f"{record}: no measured record to generate {args.docs} from (run with --record first)")
        atomic_write_text(Path(args.docs), report.name_map_page(recorded, str(record), NOT_ON_THE_INDEX.values()))
        print(f"wrote {args.docs}", file=sys.stderr)
    status = 0
    if args.check:
        differences = report.differences(table, report.read_csv(Path(args.check)))
        for line in differences:
            print(f"differs from {args.check}: {line}", file=sys.stderr)
        status = 1 if differences else 0
    if explicit and unavailable:
        return 2
    return status
