"""Snakemake's logger plugin ``balagg`` (``snakemake --logger balagg``; the workflow profile sets it): the
workflow's short console with progress, :mod:`balagg.snakemake_console`. Snakemake finds logger plugins by
this package-name prefix."""

from balagg.snakemake_console import LogHandler

__all__ = ["LogHandler"]
