"""Loss-aggregation rules for GRPO-style policy gradients, as per-response weights: the paper's math.

Every rule is a per-response weight w_i >= 0, and the loss is the weighted token *sum*

    loss = sum_i w_i * sum_t mask_it * l_it

(l_it the per-token clipped surrogate, which already carries the advantage A_i). Because the PPO clip
(min/max, dual clip) is positively homogeneous in the advantage, w_i * l_it(A_i) == l_it(w_i * A_i) for
w_i >= 0: a trainer can fold w_i into the advantage and reduce with a plain token sum. That makes every
rule exact under any micro-batching, shuffling or data-parallel sharding, and lets all rules share one
code path.

Two modules:

- :mod:`balagg.aggregation.rules`: the registry, one record per rule with its formula (name, aliases,
  default scope, parameters, what it needs, reference). No torch: the workflow imports it while it builds
  the DAG, the config loader and the schema read it, and ``--help`` lists it.
- :mod:`balagg.aggregation.weights`: the formulas evaluated on torch tensors (:func:`aggregation_weights`),
  the weighted token sum (:func:`aggregate`), :func:`microbatch_token_weights`, :func:`group_advantages`
  and :func:`length_diagnostics`.

``from balagg.aggregation import aggregation_weights, aggregate`` works as written; those names are looked
up in :mod:`~balagg.aggregation.weights` on first use (PEP 562), so that importing the package for its
registry (``balagg.aggregation.rules``) does not import torch: torch costs seconds at every start of
the workflow and of the light commands (``tests/test_imports.py`` checks which commands load it).
"""

from __future__ import annotations

from typing import Any

__all__ = ["aggregation_weights", "aggregate", "microbatch_token_weights", "group_advantages", "length_diagnostics"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from balagg.aggregation import weights

        return getattr(weights, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
