"""One cell of a campaign's grid: the value that training, evaluation and analysis name a cell by."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass

from balagg.layout import cell_relpath


@dataclass(frozen=True, order=True)
class Cell:
    """A model trained on a dataset with one aggregation rule and one seed.

    Its folder, relative to the campaign's, is :attr:`relpath` (``balagg.layout.CELL_PATTERN``); its fields are the
    workflow's wildcards of that pattern. Ordered field by field (model, dataset, aggregator, seed)."""

    model: str
    dataset: str
    aggregator: str
    seed: int

    @classmethod
    def of(cls, wildcards: Mapping) -> Cell:
        """The cell that a mapping of the pattern's wildcards (Snakemake's, or :attr:`wildcards`) names."""
        return cls(wildcards["model"], wildcards["dataset"], wildcards["aggregator"], int(wildcards["seed"]))

    @property
    def wildcards(self) -> dict:
        """The values of ``balagg.layout.CELL_PATTERN``'s wildcards."""
        return asdict(self)

    @property
    def relpath(self) -> str:
        """The cell's folder relative to its campaign folder."""
        return cell_relpath(self.model, self.dataset, self.aggregator, self.seed)

    def __str__(self) -> str:
        return self.relpath
