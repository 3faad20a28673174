"""Padding that no forward pass computes.

TRL pads a process's whole generation batch to its longest prompt (left padding) and its longest
completion (right padding), and every micro-batch cut from it keeps that width, so one long response sets
the width of every forward and backward pass of the batch. A column that no row of a micro-batch attends
to (its attention mask is 0 in every row) and that lies before every prompt token or after every
completion token can be cut without changing any loss term:

- trailing completion columns: causal attention, so no earlier token sees them, and their loss mask is 0;
- leading prompt columns: masked out as keys, and no log-prob is read there; every remaining token moves
  by the same number of positions, and rotary attention depends on position differences only.

:func:`trim_micro_batch` cuts them from a micro-batch and from every per-token tensor of it (TRL's old,
sampling and reference log-probs, the tool mask, a per-token importance ratio), so the loss, the
aggregation weights folded into the advantages and the gradients are those of the padded micro-batch
(to floating-point rounding). :func:`sort_within_steps` orders a process's rows of each optimiser step by
width, so its micro-batches hold rows of similar width; the step's gradient is a sum over its rows and
does not depend on how they are cut into micro-batches.
"""

from __future__ import annotations

from typing import Any

import torch

PROMPT_KEYS = ("prompt_ids", "prompt_mask")
"""Per-token tensors over the (left-padded) prompt."""

COMPLETION_KEYS = ("completion_ids", "completion_mask", "old_per_token_logps", "sampling_per_token_logps",
                   "ref_per_token_logps", "tool_mask", "importance_sampling_ratio")
"""Per-token tensors over the (right-padded) completion (``importance_sampling_ratio`` only in TRL's
``token_*`` modes; in the ``sequence_*`` modes it is one column and is kept)."""

MULTIMODAL_KEYS = ("pixel_values", "image_grid_thw", "pixel_attention_mask", "spatial_shapes", "image_sizes",
                   "token_type_ids", "mm_token_type_ids", "image_position_ids", "num_images", "num_tiles")
"""TRL's image inputs: they index prompt positions, so a batch holding any of them is left as it is."""


def completion_extent(mask: torch.Tensor) -> torch.Tensor:
    """Per row, the number of leading columns up to its last nonzero mask entry (0 for an empty row)."""
    columns = torch.arange(1, mask.shape[1] + 1, device=mask.device)
    return ((mask != 0) * columns).amax(dim=1) if mask.shape[1] else mask.new_zeros(mask.shape[0], dtype=torch.long)


def padding_span(prompt_mask: torch.Tensor, completion_mask: torch.Tensor,
                 multiple_of: int | None = None) -> tuple[int, int]:
    """(prompt columns to drop from the left, completion columns to keep from the left) of a micro-batch:
    the leading prompt columns masked in every row and the completion columns past every row's last
    token. At least one prompt and one completion column are kept (TRL reads ``completion_ids.size(1)``
    log-probs from the end); with ``multiple_of`` (TRL's ``pad_to_multiple_of``) the kept prompt and
    completion widths are rounded up to multiples of it."""
    if prompt_mask.dim() != 2 or completion_mask.dim() != 2 or prompt_mask.shape[0] != completion_mask.shape[0]:
        raise ValueError(f"prompt mask {tuple(prompt_mask.shape)} and completion mask {tuple(completion_mask.shape)} "
                         "are not [rows, columns] of the same rows")

    def kept(extent: torch.Tensor, width: int) -> int:
        columns = max(int(extent.max()) if extent.numel() else 0, 1)
        if multiple_of:
            columns = -(-columns // multiple_of) * multiple_of
        return min(columns, width)

    prompt_width = prompt_mask.shape[1]
    lead = prompt_width - kept(completion_extent(prompt_mask.flip(1)), prompt_width)
    return lead, kept(completion_extent(completion_mask), completion_mask.shape[1])


def trim_micro_batch(batch: dict[str, Any], multiple_of: int | None = None) -> dict[str, Any]:
    """``batch`` (a TRL micro-batch dict) without its padding columns (:func:`padding_span`). Tensors
    that are not per-token (advantages, counts) are kept as they are; a per-token-looking tensor
    ([rows, prompt or completion width]) under a key this module does not know is an error, since cutting
    or keeping it could both be wrong."""
    if any(batch.get(key) is not None for key in MULTIMODAL_KEYS):
        return batch
    prompt_mask, completion_mask = batch["prompt_mask"], batch["completion_mask"]
    rows, prompt_width, completion_width = prompt_mask.shape[0], prompt_mask.shape[1], completion_mask.shape[1]
    for key, value in batch.items():
        if (key not in PROMPT_KEYS + COMPLETION_KEYS and isinstance(value, torch.Tensor) and value.dim() >= 2
                and value.shape[0] == rows and value.shape[1] in (prompt_width, completion_width)):
            raise ValueError(f"micro-batch key {key!r} of shape {tuple(value.shape)} looks per-token; "
                             "balagg.train.padding does not know whether to cut its padding columns")
    lead, keep = padding_span(prompt_mask, completion_mask, multiple_of)
    if lead == 0 and keep == completion_width:
        return batch
    trimmed = dict(batch)
    for key in PROMPT_KEYS:
        trimmed[key] = batch[key][:, lead:]
    for key in COMPLETION_KEYS:
        value = batch.get(key)
        if isinstance(value, torch.Tensor) and value.dim() >= 2 and value.shape[1] == completion_width:
            trimmed[key] = value[:, :keep]
    return trimmed


def row_widths(prompt_mask: torch.Tensor, completion_mask: torch.Tensor) -> torch.Tensor:
    """Per row, the columns it needs: its prompt tokens plus its completion up to its last token."""
    return completion_extent(prompt_mask.flip(1)) + completion_extent(completion_mask)


def sort_within_steps(order: torch.Tensor, widths: torch.Tensor, rows_per_step: int) -> torch.Tensor:
    """``order`` (a permutation of a process's rows; rows ``k*rows_per_step ...`` train in optimiser step
    k) with each step's rows sorted by ``widths`` (indexed by row), widest first, ties in ``order``'s
    order. Each step keeps its set of rows."""
    if order.numel() % rows_per_step:
        raise ValueError(f"{order.numel()} rows are not whole optimiser steps of {rows_per_step} rows")
    steps = order.view(-1, rows_per_step)
    by_width = torch.argsort(widths[steps], dim=1, descending=True, stable=True)
    return torch.gather(steps, 1, by_width).flatten()
