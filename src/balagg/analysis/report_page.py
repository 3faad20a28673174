"""The landing page of the campaign's HTML report: Table 1 and Figures 1-3 first.

Snakemake's report (9.27) opens on its rule graph unless it is given landing-page metadata
(``snakemake --report-metadata FILE``, a flat YAML mapping); then it opens on the workflow's description
(the global ``report:`` file, reStructuredText rendered to HTML) followed by the metadata, and keeps every
result, the rule graph and the statistics in its menu. Its metadata strings pass through docutils'
default (pseudo-XML) writer and show as its parts ("whole", "encoding", ...), so the page's content goes
into the description, as raw HTML, and the metadata holds numbers only (the campaign's cells or
checkpoints and benchmarks), which are shown as they are.

The report rule writes both from the campaign's analysis folder (:func:`write_landing`): the description
(``report/landing.rst``: the campaign's name, Table 1 from ``table1.md`` as an HTML table with its notes,
Figures 1-3 embedded, in that order; a campaign without figures shows Table 1 alone) and the metadata
(``report/landing.yaml``). The workflow names the description as its report text only once it exists
(workflow/rules/report.smk).
"""

from __future__ import annotations

import base64
import html
import json
import re
from pathlib import Path

FIGURES = ("figure1", "figure2", "figure3")
FIGURE_WIDTH_PX = 900

LANDING_STYLE = ("<style>.grow.flex.items-center.justify-center.overflow-auto{align-items:flex-start;"
                 "justify-content:flex-start;padding:8px 24px}.prose.max-w-lg{max-width:none}</style>")
"""Snakemake's content pane centres its content and the description is a narrow prose column: a page
taller than the window would open in its middle, with its top (Table 1) out of reach. The style is part of
the landing page's HTML, so it applies while the page is shown and goes with it."""
_CELL = "padding:2px 8px;border-bottom:1px solid #ddd;white-space:nowrap"


def _inline(text: str) -> str:
    """Escaped text with Markdown's ``**bold**`` and ```code``` as HTML."""
    text = html.escape(text)
    text = re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", text)
    return re.sub(r"`(.+?)`", r"<code>\1</code>", text)


def markdown_table_html(markdown: str) -> str:
    """``table1.md`` (balagg.analysis.table1.to_markdown: a title, paragraphs, one pipe table, notes and
    lists) as HTML; the title is left out (the page's heading names the table)."""
    parts, table = [], []

    def close_table():
        if table:
            header, *rows = table
            head = "".join(f'<th style="{_CELL};text-align:left">{_inline(c)}</th>' for c in header)
            body = "\n".join("<tr>" + "".join(f'<td style="{_CELL}">{_inline(c)}</td>' for c in row) + "</tr>"
                              for row in rows)
            parts.append(f'<table style="border-collapse:collapse;font-size:12px;margin:6px 0">\n'
                         f"<thead><tr>{head}</tr></thead>\n<tbody>\n{body}\n</tbody></table>")
            table.clear()

    for line in markdown.splitlines():
        if line.startswith("|"):
            cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
            if not all(re.fullmatch(r":?-+:?", cell) for cell in cells):
                table.append(cells)
            continue
        close_table()
        if line.startswith("# ") or not line.strip():
            continue
        heading = line.startswith("## ")
        text = _inline(line.removeprefix("## "))
        parts.append(f'<p style="font-size:12px;margin:4px 0">{f"<b>{text}</b>" if heading else text}</p>')
    close_table()
    return "\n".join(parts)


def figure_html(png: Path) -> str:
    """A PNG embedded as a data URI, in lines of 76 characters (docutils refuses lines over 10,000; a URL
    parser drops the line breaks)."""
    data = base64.encodebytes(png.read_bytes()).decode("ascii").strip()
    return f'<img alt="{html.escape(png.name)}" style="max-width:none;width:{FIGURE_WIDTH_PX}px" src="data:image/png;base64,\n{data}">'


def landing_html(campaign_dir: str | Path) -> str:
    """The page's HTML, in order: the campaign, Table 1, then each figure there is."""
    analysis = Path(campaign_dir) / "analysis"
    parts = [LANDING_STYLE, f"<h2 style=\"font-size:18px;font-weight:bold\">Campaign {html.escape(Path(campaign_dir).name)}</h2>",
             '<p style="font-size:12px">Table 1 and Figures 1-3 of the campaign; every result (and its file), the '
             "diagnosis, the rule graph and the run's statistics are in the menu on the left.</p>",
             '<h3 style="font-size:15px;font-weight:bold;margin-top:12px">Table 1</h3>',
             markdown_table_html((analysis / "table1.md").read_text())]
    for stem in FIGURES:
        png = analysis / f"{stem}.png"
        if png.is_file():
            parts += [f'<h3 style="font-size:15px;font-weight:bold;margin-top:12px">Figure '
                      f'{stem.removeprefix("figure")}</h3>', figure_html(png)]
    return "\n".join(parts)


def landing_rst(campaign_dir: str | Path) -> str:
    """:func:`landing_html` as the workflow's report text: one raw-HTML block, kept from Snakemake's Jinja
    pass over report texts (``{% raw %}``)."""
    body = "\n".join(f"   {line}" for line in landing_html(campaign_dir).splitlines())
    return "{% raw %}\n.. raw:: html\n\n" + body + "\n\n{% endraw %}\n"


def landing_numbers(campaign_dir: str | Path) -> dict[str, int]:
    """The metadata: numbers that make Snakemake open the report on its landing page (from ``table1.csv``:
    its rows of cells and of external checkpoints), and the campaign's benchmarks (``data/**/bench/``)."""
    import csv

    from balagg.external_checkpoints import CHECKPOINT_DATASET

    campaign_dir = Path(campaign_dir)
    with (campaign_dir / "analysis" / "table1.csv").open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    checkpoints = sum(row.get("dataset") == CHECKPOINT_DATASET for row in rows)
    numbers = {"Table 1 rows": len(rows) - checkpoints, "Checkpoints evaluated only": checkpoints}
    benchmarks = {path.stem for path in (campaign_dir / "data").glob("**/bench/*.jsonl")}
    if benchmarks:
        numbers["Benchmarks"] = len(benchmarks)
    return {key: value for key, value in numbers.items() if value}


def write_landing(campaign_dir: str | Path, rst: str | Path, metadata: str | Path) -> None:
    """Write the landing page's report text (:func:`landing_rst`) and metadata (:func:`landing_numbers`,
    as the YAML ``snakemake --report-metadata`` reads; JSON is YAML)."""
    from balagg.io import atomic_write_text

    atomic_write_text(rst, landing_rst(campaign_dir))
    atomic_write_text(metadata, json.dumps(landing_numbers(campaign_dir)) + "\n")
