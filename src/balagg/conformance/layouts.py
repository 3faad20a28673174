"""How one optimiser step is split, as the engines split it.

A layout orders the batch's rows (by groups), pads them to a width, shards them over data-parallel ranks
(contiguous halves) and cuts each rank's share into equal micro-batches (contiguous, the engine's gradient
accumulation). Comparing an engine's weights across layouts gives its invariances (:data:`INVARIANCES`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from balagg.conformance.batches import Batch


@dataclass(frozen=True)
class Layout:
    """One split of a step."""

    name: str
    ranks: int = 1
    """data-parallel ranks (gloo processes)"""
    micro_batches: int = 1
    """micro-batches per rank (gradient accumulation steps)"""
    group_order: str = "given"
    """``given``: groups in order; ``interleaved``: even groups first, then odd ones, so that different
    groups share a micro-batch"""
    extra_padding: int = 0
    """columns of padding beyond the budget"""
    packed: bool = False
    """rows packed into one sequence per micro-batch (engines that pack)"""

    def width(self, batch: Batch) -> int:
        """The padded width: the budget (a truncated response reaches it) plus extra padding."""
        return batch.budget + self.extra_padding

    def row_order(self, batch: Batch) -> torch.Tensor:
        """The order in which the rows reach the engine (whole groups, contiguous)."""
        groups = int(batch.group_ids.max()) + 1
        order = list(range(groups))
        if self.group_order == "interleaved":
            order = order[0::2] + order[1::2]
        return torch.cat([torch.nonzero(batch.group_ids == g).flatten() for g in order])

    def split(self, batch: Batch) -> list[list[torch.Tensor]]:
        """Per rank, per micro-batch, the batch's row indices."""
        order = self.row_order(batch)
        if batch.size % (self.ranks * self.micro_batches):
            raise ValueError(f"layout {self.name}: {batch.size} rows do not split into {self.ranks} ranks x "
                             f"{self.micro_batches} micro-batches")
        shards = order.chunk(self.ranks)
        return [list(shard.chunk(self.micro_batches)) for shard in shards]

    def micro_batch_ids(self, batch: Batch) -> torch.Tensor:
        """[B] the global micro-batch of each row (rank-major)."""
        ids = torch.empty(batch.size, dtype=torch.long)
        for rank, micro in enumerate(self.split(batch)):
            for index, rows in enumerate(micro):
                ids[rows] = rank * self.micro_batches + index
        return ids


LAYOUTS: tuple[Layout, ...] = (
    Layout("1 micro-batch"),
    Layout("2 micro-batches", micro_batches=2),
    Layout("4 micro-batches", micro_batches=4),
    Layout("2 micro-batches, regrouped", micro_batches=2, group_order="interleaved"),
    Layout("2 ranks x 2 micro-batches", ranks=2, micro_batches=2),
    Layout("padded", extra_padding=7),
    Layout("packed", packed=True),
)
"""Every layout the check runs (``packed`` only for engines that pack)."""

BY_NAME = {layout.name: layout for layout in LAYOUTS}

INVARIANCES: dict[str, tuple[str, str]] = {
    "accumulation": ("1 micro-batch", "4 micro-batches"),
    "micro-batch": ("2 micro-batches", "2 micro-batches, regrouped"),
    "data-parallel": ("4 micro-batches", "2 ranks x 2 micro-batches"),
    "padding": ("1 micro-batch", "padded"),
    "packing": ("1 micro-batch", "packed"),
}
"""Each invariance and the two layouts whose weights must agree for it to hold: the same step split into
more micro-batches; the same number of micro-batches holding other rows; the same micro-batches spread
over two ranks; wider padding; packed rows."""
