"""The cell's seed in TRL's colocated vLLM engine and in the trainer's random streams.

TRL builds the colocated engine with ``seed = process_index // tensor_parallel_size`` and vLLM seeds the
process's global RNGs (Python, NumPy, torch CPU and CUDA) with it when the engine starts, in the training
process itself (``distributed_executor_backend="external_launcher"``). That comes after TRL's
``set_seed(args.seed, device_specific=True)``, so every later draw of the trainer (the order of responses
or groups in mini-batches) and vLLM's sampling (which draws from the global CUDA generator) would depend
on the rank only: two cells that differ only in ``seed`` would share the same sampling noise and the same
mini-batch order, and differ only in their prompt order.

:func:`seeded_colocated_engine` wraps the engine's construction while a trainer is built: the engine's
seed becomes :func:`engine_seed` of the cell seed and TRL's value, and the global RNGs are restored to
what they were just before the engine was created (TRL's ``set_seed`` from the cell seed).
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch


def engine_seed(cell_seed: int, rank_group: int) -> int:
    """The colocated engine's seed for ``cell_seed`` on a rank in tensor-parallel group ``rank_group``
    (TRL's seed argument): the same within a group (tensor-parallel workers must sample alike), distinct
    for every (cell seed, group) pair (``cell_seed + rank_group`` would give seed 1 on rank 0 the
    stream of seed 0 on rank 1), below 2**32 (NumPy's limit)."""
    if cell_seed < 0 or rank_group < 0:
        raise ValueError(f"seeds must be >= 0, got cell seed {cell_seed} and rank group {rank_group}")
    return int(np.random.SeedSequence([cell_seed, rank_group]).generate_state(1)[0])


@contextlib.contextmanager
def preserved_rng_states() -> Iterator[None]:
    """The Python, NumPy, torch CPU and (where CUDA is up) CUDA generator states on leaving are those on
    entering."""
    python_state, numpy_state, torch_state = random.getstate(), np.random.get_state(), torch.get_rng_state()
    cuda_states = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None
    try:
        yield
    finally:
        random.setstate(python_state)
        np.random.set_state(numpy_state)
        torch.set_rng_state(torch_state)
        if cuda_states is not None:
            torch.cuda.set_rng_state_all(cuda_states)


@contextlib.contextmanager
def seeded_colocated_engine(cell_seed: int) -> Iterator[None]:
    """While it is open, TRL's colocated vLLM engine (``trl.generation.vllm_generation.LLM``) is built
    with :func:`engine_seed` and leaves the process's RNG states as they were. Without vLLM, nothing."""
    from trl.generation import vllm_generation

    original = getattr(vllm_generation, "LLM", None)
    if original is None:
        yield
        return

    def build(*args: Any, **kwargs: Any) -> Any:
        kwargs["seed"] = engine_seed(cell_seed, int(kwargs.get("seed") or 0))
        with preserved_rng_states():
            return original(*args, **kwargs)

    vllm_generation.LLM = build
    try:
        yield
    finally:
        vllm_generation.LLM = original
