"""Where a campaign's time went, by rule, from Snakemake's benchmark files.

    python bench/demo.py [results/default]

Every rule that runs a command writes ``benchmark:`` TSVs (s = wall seconds, cpu_time = CPU seconds)
under ``results/{campaign}/**/benchmarks/``; the rule is the file's folder below ``benchmarks/`` or
the file name up to its first ``-`` (``generate-000020.tsv``). Prints jobs, wall and CPU seconds per
rule, their totals and (``--wall``) the pipeline's measured wall time for comparison.
"""

from __future__ import annotations

import argparse
import csv
from collections import defaultdict
from pathlib import Path


def rule_of(path: Path) -> str:
    parts = path.parts
    below = parts[len(parts) - 1 - parts[::-1].index("benchmarks") + 1:]
    return below[0] if len(below) > 1 else below[0].removesuffix(".tsv").split("-")[0]


def split_by_rule(campaign_dir: Path) -> dict[str, dict[str, float]]:
    """``{rule: {"jobs", "wall_s", "cpu_s"}}`` summed over the campaign's benchmark files."""
    totals: dict[str, dict[str, float]] = defaultdict(lambda: {"jobs": 0, "wall_s": 0.0, "cpu_s": 0.0})
    for path in sorted(campaign_dir.glob("**/benchmarks/**/*.tsv")):
        with path.open(newline="") as handle:
            rows = list(csv.DictReader(handle, delimiter="\t"))
        if not rows:
            continue
        entry = totals[rule_of(path)]
        entry["jobs"] += 1
        entry["wall_s"] += float(rows[-1]["s"])
        cpu = rows[-1].get("cpu_time", "NA")
        entry["cpu_s"] += float(cpu) if cpu not in ("", "NA") else 0.0
    return dict(totals)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("campaign_dir", nargs="?", type=Path, default=Path("results/default"))
    parser.add_argument("--wall", type=float, default=None, help="measured wall seconds of the whole pipeline")
    args = parser.parse_args()
    totals = split_by_rule(args.campaign_dir)
    if not totals:
        raise SystemExit(f"no benchmark files under {args.campaign_dir}")
    print(f"{'rule':<22} {'jobs':>5} {'wall s':>9} {'cpu s':>9} {'cpu/job':>8}")
    for rule, entry in sorted(totals.items(), key=lambda item: -item[1]["cpu_s"]):
        print(f"{rule:<22} {entry['jobs']:>5d} {entry['wall_s']:>9.1f} {entry['cpu_s']:>9.1f} "
              f"{entry['cpu_s'] / entry['jobs']:>8.2f}")
    jobs = sum(e["jobs"] for e in totals.values())
    wall = sum(e["wall_s"] for e in totals.values())
    cpu = sum(e["cpu_s"] for e in totals.values())
    print(f"{'total':<22} {jobs:>5d} {wall:>9.1f} {cpu:>9.1f}")
    if args.wall:
        print(f"pipeline wall {args.wall:.0f} s: job wall sum / pipeline wall = {wall / args.wall:.2f} jobs running on average")


if __name__ == "__main__":
    main()
