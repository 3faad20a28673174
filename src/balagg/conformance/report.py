"""The conformance report: rows, CSV, markdown, one figure, and the docs page (the name map).

A report is a list of rows, one per (engine, version, option, setting) (:func:`rows`). The CSV is the
measured record: running engines in separate environments merges their rows into one file
(:func:`merge`). :func:`name_map_page` turns the registry plus such a record into docs/conformance.md:
for every rule, the engine options measured to equal it with their invariances, then the findings and
the whole table. Nothing in that page is written by hand.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Iterable
from pathlib import Path

from balagg.aggregation.rules import AGGREGATORS
from balagg.conformance.compare import TOLERANCE, OptionResult
from balagg.conformance.layouts import INVARIANCES, LAYOUTS
from balagg.io import atomic_write_text

FIELDS = ["engine", "version", "option", "setting", "claims", "equals", "conforms", "largest_deviation",
          *INVARIANCES, "also_equals", "findings", "issues"] + [f"deviation:{rule.name}" for rule in AGGREGATORS]
"""The CSV's columns: the invariances hold (yes), do not (no), or were not tested (-); ``deviation:<rule>``
is the worst deviation from each rule at its default scope and parameters, over every layout."""

KEY = ("engine", "option", "setting")


def _yes_no(value: bool | None) -> str:
    return "-" if value is None else ("yes" if value else "no")


def _number(value: float) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.3g}"


def rows(results: Iterable[OptionResult]) -> list[dict[str, str]]:
    """One CSV row per result."""
    out = []
    for result in results:
        row = {"engine": result.engine, "version": result.version, "option": result.option,
               "setting": result.setting, "claims": result.claims or "-", "equals": result.match,
               "conforms": _yes_no(result.conforms), "largest_deviation": _number(result.largest_deviation),
               "also_equals": "; ".join(label for label in result.matches if label != result.match),
               "findings": " | ".join(result.findings), "issues": " ".join(result.issues)}
        for invariance in INVARIANCES:
            row[invariance] = _yes_no(result.invariances.get(invariance)) if not result.error else "-"
        for rule in AGGREGATORS:
            by_layout = result.deviations.get(rule.name, {}) if not result.error else {}
            row[f"deviation:{rule.name}"] = _number(max(by_layout.values())) if by_layout else "-"
        out.append(row)
    return out


def to_csv(table: list[dict[str, str]]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=FIELDS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(table)
    return buffer.getvalue()


def read_csv(path: Path) -> list[dict[str, str]]:
    """The rows of a conformance CSV (an empty list when the file does not exist)."""
    if not path.exists():
        return []
    with path.open(newline="") as handle:
        table = list(csv.DictReader(handle))
    missing = [field for field in ("engine", "option", "setting", "equals") if table and field not in table[0]]
    if missing:
        raise ValueError(f"{path}: not a conformance CSV (no column {', '.join(missing)})")
    return table


def merge(old: list[dict[str, str]], new: list[dict[str, str]]) -> list[dict[str, str]]:
    """``old`` with every engine measured in ``new`` replaced by its new rows (engines in report order)."""
    from balagg.conformance.engines import ENGINES

    measured = {row["engine"] for row in new}
    kept = [row for row in old if row["engine"] not in measured]
    order = {name: index for index, name in enumerate(ENGINES)}
    merged = kept + new
    return sorted(merged, key=lambda row: order.get(row["engine"], len(order)))


def differences(measured: list[dict[str, str]], recorded: list[dict[str, str]]) -> list[str]:
    """One line per measured row whose rule, conformance or invariances differ from the record's."""
    index = {tuple(row[key] for key in KEY): row for row in recorded}
    compared = ("equals", "conforms", *INVARIANCES)
    out = []
    for row in measured:
        key = tuple(row[k] for k in KEY)
        old = index.get(key)
        if old is None:
            out.append(f"{' '.join(key)}: not in the record")
            continue
        changed = [f"{field} {old.get(field)} -> {row[field]}" for field in compared if old.get(field) != row[field]]
        if changed:
            out.append(f"{row['engine']} {row['option']} ({row['setting']}): " + ", ".join(changed))
    return out


def _label(row: dict[str, str]) -> str:
    setting = "" if row["setting"] == "default" else f" ({row['setting']})"
    return f"{row['option']}{setting}"


def markdown_table(table: list[dict[str, str]]) -> str:
    """The report's table: engine, version, option (setting), claims, equals, deviation, invariances."""
    head = ["engine", "version", "option (setting)", "claims", "equals", "largest deviation", *INVARIANCES]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in table:
        cells = [row["engine"], row["version"], _label(row), row["claims"], f"`{row['equals']}`",
                 row["largest_deviation"], *(row[invariance] for invariance in INVARIANCES)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def findings(table: list[dict[str, str]]) -> list[str]:
    """One bullet per finding: the engine option and what it does instead of what it claims."""
    return [f"- **{row['engine']} {row['version']}** `{_label(row)}`: {finding}"
            for row in table for finding in row["findings"].split(" | ") if finding]


def report_markdown(table: list[dict[str, str]], unavailable: list[str]) -> str:
    """The report a run writes (table, findings, what could not be checked)."""
    parts = ["# Conformance of engine loss aggregation", "",
             f"Equal means within {TOLERANCE:g} of the rule's weights, relative to the largest, on every batch and "
             "every layout (" + "; ".join(layout.name for layout in LAYOUTS) + ").", "", markdown_table(table), ""]
    found = findings(table)
    parts += ["## Findings", "", *(found or ["None."]), ""]
    if unavailable:
        parts += ["## Not checked", "", *(f"- {line}" for line in unavailable), ""]
    return "\n".join(parts)


def figure(table: list[dict[str, str]], path: Path) -> bool:
    """One heat map: engine options x rules, the deviation from each rule (green: equal), the claimed
    rule outlined. Returns False when matplotlib is not installed (the engines' environments lack it) or
    nothing ran."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.colors import LogNorm
        from matplotlib.patches import Rectangle
    except ImportError:
        return False
    rules = [rule.name for rule in AGGREGATORS]
    ran = [row for row in table if row["equals"] != "not run"]
    if not ran:
        return False
    values = [[float(row[f"deviation:{rule}"]) if row[f"deviation:{rule}"] not in ("-", "inf") else 10.0
               for rule in rules] for row in ran]
    equal_shade = 1e-6  # every deviation within TOLERANCE is drawn as equal
    values = [[equal_shade if v <= TOLERANCE else min(v, 10.0) for v in line] for line in values]
    labels = [f"{row['engine']} {_label(row)}" for row in ran]
    width = 2.5 + 0.42 * len(rules) + 0.065 * max(len(label) for label in labels)
    fig, ax = plt.subplots(figsize=(width, 2.0 + 0.3 * len(ran)))
    image = ax.imshow(values, cmap="RdYlGn_r", norm=LogNorm(vmin=equal_shade, vmax=1.0), aspect="auto")
    ax.set_xticks(range(len(rules)), rules, rotation=60, ha="right", fontsize=8)
    ax.set_yticks(range(len(ran)), labels, fontsize=7)
    for y, row in enumerate(ran):
        if row["claims"] in rules:
            x = rules.index(row["claims"])
            ax.add_patch(Rectangle((x - 0.5, y - 0.5), 1, 1, fill=False, edgecolor="black", linewidth=1.6))
    fig.colorbar(image, ax=ax, label=f"largest relative deviation of the weights (<= {TOLERANCE:g}: equal)")
    ax.set_title("Which rule each engine option equals (green)\noutlined: the rule its name claims", fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return True


def name_map_page(table: list[dict[str, str]], source: str, unavailable: Iterable[str] = ()) -> str:
    """docs/conformance.md: the registry's rules, each with the engine options measured to equal it."""
    equal: dict[str, list[dict[str, str]]] = {rule.name: [] for rule in AGGREGATORS}
    for row in table:
        labels = [row["equals"], *[label for label in row["also_equals"].split("; ") if label]]
        for label in labels:  # the rule at its default scope (any published parameter)
            rule = label.split(" ")[0]
            if rule in equal and " @" not in label and row not in equal[rule]:
                equal[rule].append(row)
    lines = ["# Conformance: which engine option is which rule",
             "",
             f"Generated by `python -m balagg conformance --engine none --docs docs/conformance.md` from the rule "
             f"registry (`balagg.aggregation.rules`) and the measured record `{source}`, which each engine's environment "
             f"adds its rows to with `--record {source}` (CI re-measures them with `--check {source}`); do not "
             "edit by hand. How it is measured: "
             "each engine's own loss and reduction code runs on seeded batches of GRPO groups, split into 1, 2 and 4 "
             "micro-batches, 2 data-parallel ranks over gloo, extra padding and (where the engine packs) packed "
             "rows; a response's effective weight is the gradient of the engine's loss with respect to its tokens' "
             f"log-probabilities divided by its advantage, and an option equals a rule when the weights agree to "
             f"{TOLERANCE:g} on every batch and split (`balagg.conformance`). Rerun it on your engine: README, "
             "\"Check your engine\".",
             "",
             "## The name map",
             "",
             "| rule | what it is | reference | engine options that equal it (invariances that hold) |",
             "|---|---|---|---|"]
    for rule in AGGREGATORS:
        options = []
        for row in equal[rule.name]:
            holds = [name for name in INVARIANCES if row[name] == "yes"]
            options.append(f"{row['engine']} {row['version']} `{_label(row)}` ({', '.join(holds) or 'none'})")
        lines.append(f"| `{rule.name}` | {rule.description} | {rule.reference} | "
                     f"{'<br>'.join(options) or '(none measured)'} |")
    lines += ["", "## Findings", "", *(findings(table) or ["None."]), ""]
    lines += ["## Every option measured", "", markdown_table(table), ""]
    if unavailable:
        lines += ["## Not checked", "", *(f"- {line}" for line in unavailable), ""]
    return "\n".join(lines)


def write(table: list[dict[str, str]], unavailable: list[str], folder: Path) -> list[Path]:
    """conformance.csv, conformance.md and (with matplotlib) conformance.png under ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    written = [folder / "conformance.csv", folder / "conformance.md"]
    atomic_write_text(written[0], to_csv(table))
    atomic_write_text(written[1], report_markdown(table, unavailable))
    if figure(table, folder / "conformance.png"):
        written.append(folder / "conformance.png")
    return written
