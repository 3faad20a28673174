"""Where a campaign's time went, by rule, from Snakemake's benchmark files.

    python bench/demo.py [results/default]

Every rule that runs a command writes ``benchmark:`` TSVs (s = wall seconds, cpu_time = CPU seconds)
under ``results/{campaign}/**/benchmarks/``; the rule is the file's folder below ``benchmarks/`` or
the file name up to its first ``-`` (``generate-000020.tsv``). Prints jobs, wall and CPU seconds per
rule, their totals and (``--wall``) the pipeline's measured wall time for comparison.

Under ``balagg jobserver`` (``make demo``) a job's work is done in a process forked from the server, not
below Snakemake's job, so Snakemake's ``cpu_time`` sees only the client; the server's log
(``results/{campaign}/logs/jobserver.log``) has each served job's wall and CPU seconds (``wait4``), and
a second table sums them by command.
"""

from __future__ import annotations

import argparse
import csv
import re
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


SERVED = re.compile(r"job \d+ ended \((-?\d+)\) after ([\d.]+) s, ([\d.]+) CPU s: (\S+)")


def served_by_command(log: Path) -> dict[str, dict[str, float]]:
    """``{command: {"jobs", "wall_s", "cpu_s"}}`` of the jobs the job server ran (``train``, the launcher,
    apart from the ``train-worker`` processes it starts for a cell of several)."""
    totals: dict[str, dict[str, float]] = defaultdict(lambda: {"jobs": 0, "wall_s": 0.0, "cpu_s": 0.0})
    for line in log.read_text().splitlines():
        match = SERVED.search(line)
        if match:
            command = match.group(4)
            entry = totals[command]
            entry["jobs"] += 1
            entry["wall_s"] += float(match.group(2))
            entry["cpu_s"] += float(match.group(3))
    return dict(totals)


def print_table(title: str, totals: dict[str, dict[str, float]]) -> None:
    print(f"{title:<22} {'jobs':>5} {'wall s':>9} {'cpu s':>9} {'cpu/job':>8}")
    for name, entry in sorted(totals.items(), key=lambda item: -item[1]["cpu_s"]):
        print(f"{name:<22} {entry['jobs']:>5d} {entry['wall_s']:>9.1f} {entry['cpu_s']:>9.1f} "
              f"{entry['cpu_s'] / entry['jobs']:>8.2f}")
    print(f"{'total':<22} {sum(e['jobs'] for e in totals.values()):>5d} "
          f"{sum(e['wall_s'] for e in totals.values()):>9.1f} {sum(e['cpu_s'] for e in totals.values()):>9.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("campaign_dir", nargs="?", type=Path, default=Path("results/default"))
    parser.add_argument("--wall", type=float, default=None, help="measured wall seconds of the whole pipeline")
    args = parser.parse_args()
    totals = split_by_rule(args.campaign_dir)
    if not totals:
        raise SystemExit(f"no benchmark files under {args.campaign_dir}")
    print_table("rule", totals)
    wall = sum(e["wall_s"] for e in totals.values())
    log = args.campaign_dir / "logs" / "jobserver.log"
    if log.is_file():
        print(f"\nserved by the job server ({log}):")
        print_table("command", served_by_command(log))
    if args.wall:
        print(f"pipeline wall {args.wall:.0f} s: job wall sum / pipeline wall = {wall / args.wall:.2f} jobs running on average")


if __name__ == "__main__":
    main()
