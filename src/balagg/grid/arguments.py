"""The command-line arguments that a campaign's jobs take from the config."""

from __future__ import annotations

from balagg.config_flags import config_flags
from balagg.grid.grid import Grid


def generate_args(grid: Grid, model: str) -> str:
    """The settings flags of ``model``'s generate jobs (:meth:`Grid.generation_settings`), written from
    :class:`GenerationConfig` as ``generate`` reads them."""
    from balagg.evaluation.generation.requests import GenerationConfig

    return config_flags(GenerationConfig, grid.generation_settings(model))


def score_args(grid: Grid) -> str:
    """The settings flags of every score job (:meth:`Grid.score_settings`), written from :class:`ScoreConfig`
    as ``score`` reads them."""
    from balagg.evaluation.scoring.config import ScoreConfig

    return config_flags(ScoreConfig, grid.score_settings())


def data_selector(kind: str, name: str, loader: str) -> str:
    """What ``python -m balagg prepare-data`` prepares: ``--dataset LOADER`` (a training set) or ``--benchmark``."""
    return f"--dataset {loader}" if kind == "train" else f"--benchmark {name}"


def tinyworld_regime_arg(spec: dict) -> str:
    """``--regime NAME`` for a tiny model with a laboratory length regime (docs/laboratory.md), else nothing."""
    regime = spec.get("tinyworld_regime")
    return f"--regime {regime}" if regime else ""
