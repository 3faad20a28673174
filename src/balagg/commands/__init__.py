"""Subcommands of ``python -m balagg`` (see :mod:`balagg.cli`)."""
