"""``EpochRepeatSampler``: TRL's prompt sampler with an order that is a function of (seed, epoch) only.

TRL's ``RepeatSampler`` draws each epoch's permutation from one generator seeded once, at construction;
the generator is in no checkpoint, and transformers resumes a run at the checkpoint's epoch with a new
sampler, skipping batches only inside that epoch. A run resumed in epoch e >= 1 would therefore train
epoch e on epoch 0's order. This sampler draws epoch e's permutation as the (e+1)-th permutation of a
generator seeded with ``seed`` (so the uninterrupted order is exactly TRL's), from scratch at every
iteration: a fresh sampler told its epoch (``set_epoch``) yields what the uninterrupted one does.
"""

from __future__ import annotations

from collections.abc import Iterator, Sized

import torch
from trl.trainer.utils import RepeatSampler


class EpochRepeatSampler(RepeatSampler):
    """``RepeatSampler`` (same arguments, same repetition layout) whose shuffled order for the epoch set by
    :meth:`set_epoch` (default 0) depends on ``seed`` and that epoch only."""

    def __init__(self, data_source: Sized, mini_repeat_count: int, batch_size: int = 1, repeat_count: int = 1,
                 shuffle: bool = True, *, seed: int) -> None:
        if not isinstance(seed, int):
            raise ValueError(f"EpochRepeatSampler needs an integer seed, got {seed!r}")
        super().__init__(data_source, mini_repeat_count, batch_size=batch_size, repeat_count=repeat_count,
                         shuffle=shuffle, seed=seed)
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        """The epoch the next iteration yields (transformers and the trainer call it before each epoch)."""
        if epoch < 0:
            raise ValueError(f"epoch must be >= 0, got {epoch}")
        self.epoch = epoch

    def __iter__(self) -> Iterator[int]:
        if self.shuffle:
            self.generator.manual_seed(self.seed)
            for _ in range(self.epoch):  # the permutations of the epochs before
                torch.randperm(self.num_samples, generator=self.generator)
        yield from super().__iter__()
