"""Run an engine's loss over a layout and read off each response's effective weight.

The policy's per-token log-probabilities are a leaf tensor; the engine's old log-probabilities are the
same values (on policy: every ratio is 1, inside every clip range). An adapter
(:class:`balagg.conformance.engines.base.Adapter`) runs the engine's own code over one rank's micro-batches
and calls ``backward`` on each loss the way the engine does. With several ranks each runs in its own
process of a gloo group and the gradients are averaged over the ranks, as DDP and FSDP do. Then

    w_it = -(d loss / d logp_it) / A_i

is the weight the engine gives token t of response i (the clipped surrogate's derivative at ratio 1 is
-A_i). A rule is a per-response weight, so a conforming engine gives every loss token of a response the
same w_it and the padding none: :class:`Measurement` keeps the spread and the padding's gradient too.
"""

from __future__ import annotations

import os
import queue
import tempfile
import traceback
from dataclasses import dataclass
from typing import Any

import torch

from balagg.conformance.batches import Batch
from balagg.conformance.layouts import Layout

LOG_PROB = -0.7
"""The log-probability of every token (any value: only the ratio to the old log-probability enters)."""


@dataclass
class MicroBatch:
    """One micro-batch as a padded engine sees it (rows in the layout's order)."""

    rows: torch.Tensor
    """[m] the batch's row indices"""
    log_prob: torch.Tensor
    """[m, W] rows of the leaf (gradients flow to it)"""
    old_log_prob: torch.Tensor
    """[m, W] the same values, detached"""
    advantages: torch.Tensor
    """[m] one advantage per response"""
    mask: torch.Tensor
    """[m, W] float64 loss mask"""
    group_ids: torch.Tensor
    """[m] group of each row"""

    @property
    def lengths(self) -> torch.Tensor:
        return self.mask.sum(-1).long()

    def packed(self) -> dict[str, torch.Tensor]:
        """The micro-batch as one packed sequence (no padding): 1-D ``log_prob``, ``old_log_prob``,
        token ``advantages``, bool ``mask`` and ``cu_seqlens`` [m + 1]."""
        keep = self.mask.bool()
        lengths = keep.sum(-1)
        return {"log_prob": self.log_prob[keep], "old_log_prob": self.old_log_prob[keep],
                "advantages": self.advantages[:, None].expand_as(self.mask)[keep],
                "mask": torch.ones(int(lengths.sum()), dtype=torch.bool),
                "cu_seqlens": torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)])}


@dataclass
class RankStep:
    """One rank's share of an optimiser step."""

    rank: int
    ranks: int
    micro_batches: list[MicroBatch]
    batch: Batch
    width: int
    packed: bool
    distributed: bool
    """a gloo process group is initialised (the engine may all-reduce over it)"""
    order: torch.Tensor
    """[B] the whole step's rows in the order the engine receives them (before sharding: what a trainer
    that normalises a mini-batch on its driver sees)"""

    @property
    def global_rows(self) -> int:
        return self.batch.size


@dataclass
class Measurement:
    """What one run of an engine option over one batch and layout gave."""

    weights: torch.Tensor
    """[B] effective weight of each response (NaN where A_i = 0: no gradient shows it)"""
    token_spread: float
    """largest |w_it - w_i| over loss tokens, relative to the largest |w_i|"""
    padding_gradient: float
    """largest |d loss / d logp| on a padding column, relative to the largest on a loss token"""


def rank_step(batch: Batch, layout: Layout, rank: int, leaf: torch.Tensor, distributed: bool) -> RankStep:
    """The micro-batches of ``rank`` under ``layout``, cut from the leaf log-probabilities."""
    width = layout.width(batch)
    mask = batch.mask(width)
    micro = []
    for rows in layout.split(batch)[rank]:
        micro.append(MicroBatch(rows=rows, log_prob=leaf[rows], old_log_prob=leaf.detach()[rows].clone(),
                                advantages=batch.advantages[rows].clone(), mask=mask[rows].clone(),
                                group_ids=batch.group_ids[rows].clone()))
    return RankStep(rank, layout.ranks, micro, batch, width, layout.packed, distributed, layout.row_order(batch))


def _leaf(batch: Batch, layout: Layout) -> torch.Tensor:
    return torch.full((batch.size, layout.width(batch)), LOG_PROB, dtype=torch.float64, requires_grad=True)


def read_weights(gradient: torch.Tensor, batch: Batch) -> Measurement:
    """Effective weights from the gradient w.r.t. the leaf log-probabilities (module docstring)."""
    mask = batch.mask(gradient.shape[1]).bool()
    observable = batch.advantages != 0
    per_token = -gradient / torch.where(observable, batch.advantages, 1.0)[:, None]
    weights = torch.full((batch.size,), float("nan"), dtype=torch.float64)
    spread = 0.0
    for i in torch.nonzero(observable).flatten().tolist():
        tokens = per_token[i][mask[i]]
        weights[i] = tokens.mean()
        spread = max(spread, float((tokens - tokens.mean()).abs().max()))
    scale = float(weights[observable].abs().max()) if observable.any() else 0.0
    loss_grad = float(gradient[mask].abs().max()) if mask.any() else 0.0
    padding = float(gradient[~mask].abs().max()) if (~mask).any() else 0.0
    return Measurement(weights, spread / scale if scale else 0.0, padding / loss_grad if loss_grad else 0.0)


def measure(adapter: Any, option: Any, batch: Batch, layout: Layout) -> Measurement:
    """Run ``option`` of ``adapter`` over ``batch`` split by a one-rank ``layout``, in this process."""
    if layout.ranks != 1:
        raise ValueError("measure runs one rank; several ranks go through measure_distributed")
    leaf = _leaf(batch, layout)
    adapter.run_rank(option, rank_step(batch, layout, 0, leaf, distributed=False))
    gradient = leaf.grad if leaf.grad is not None else torch.zeros_like(leaf)
    return read_weights(gradient, batch)


def _rank_worker(rank: int, ranks: int, init_file: str, adapter: Any, jobs: list, results: Any) -> None:
    """One gloo rank: every job's rank share, then the ranks' gradients averaged (DDP's all-reduce)."""
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=ranks)
    try:
        adapter.load()
        for key, option, batch, layout in jobs:
            leaf = _leaf(batch, layout)
            error = ""
            try:
                adapter.run_rank(option, rank_step(batch, layout, rank, leaf, distributed=True))
            except Exception as exc:  # the engine's code failed: reported, never taken for conformance
                error = f"{type(exc).__name__}: {exc}".splitlines()[0]
            failed = torch.tensor([1.0 if error else 0.0])
            dist.all_reduce(failed)
            gradient = leaf.grad if leaf.grad is not None else torch.zeros_like(leaf)
            gradient = gradient.detach().clone()
            dist.all_reduce(gradient)
            gradient /= ranks
            if rank == 0:
                # plain lists: a tensor would travel as shared memory that dies with this process
                results.put((key, None if failed.item() else gradient.tolist(),
                             error or ("failed on another rank" if failed.item() else "")))
    except Exception:
        if rank == 0:
            results.put((None, None, traceback.format_exc().strip().splitlines()[-1]))
    finally:
        dist.destroy_process_group()


def measure_distributed(adapter: Any, jobs: list[tuple[Any, Any, Batch, Layout]]) -> dict[Any, Measurement | str]:
    """Run several (key, option, batch, layout) jobs, all of the same rank count, in one gloo group of
    spawned processes. Returns key -> :class:`Measurement`, or the one-line error of a failed job."""
    import torch.multiprocessing as mp

    if not jobs:
        return {}
    ranks = jobs[0][3].ranks
    context = mp.get_context("spawn")
    results = context.Queue()
    with tempfile.TemporaryDirectory() as folder:
        init_file = os.path.join(folder, "gloo-init")
        processes = [context.Process(target=_rank_worker, args=(rank, ranks, init_file, adapter, jobs, results))
                     for rank in range(ranks)]
        for process in processes:
            process.start()
        out: dict[Any, Measurement | str] = {}
        batches = {key: batch for key, _, batch, _ in jobs}
        try:
            while len(out) < len(jobs):
                try:
                    key, gradient, error = results.get(timeout=2)
                except queue.Empty:
                    if any(process.is_alive() for process in processes):
                        continue
                    codes = [process.exitcode for process in processes]
                    return {k: f"the {ranks} gloo ranks exited without a result (exit codes {codes})"
                            for k, _, _, _ in jobs if k not in out} | out
                if key is None:
                    return {k: f"the {ranks}-rank run failed: {error}" for k, _, _, _ in jobs}
                out[key] = error if gradient is None else read_weights(
                    torch.tensor(gradient, dtype=torch.float64), batches[key])
        finally:
            for process in processes:
                process.join(timeout=30)
                if process.is_alive():
                    process.kill()
    return out
