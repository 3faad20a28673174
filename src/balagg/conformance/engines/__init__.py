"""One adapter per engine (:class:`~balagg.conformance.engines.base.Adapter`), by command-line name.

Adapter modules import their engine only in ``load()``, so listing them costs nothing. ROLL has no
adapter: it is not on the package index (the index's ``roll`` is an unrelated project), so neither CI nor
a user's ``pip install`` can bring it; :data:`NOT_ON_THE_INDEX` says so in the report.
"""

from __future__ import annotations

import importlib

from balagg.conformance.engines.base import Adapter, EngineUnavailable, Option

ENGINES: dict[str, str] = {
    "trl": "balagg.conformance.engines.trl:TRLEngine",
    "verl": "balagg.conformance.engines.verl:VerlEngine",
    "skyrl": "balagg.conformance.engines.skyrl:SkyRLEngine",
    "openrlhf": "balagg.conformance.engines.openrlhf:OpenRLHFEngine",
    "areal": "balagg.conformance.engines.areal:ArealEngine",
}
"""The real engines, in report order."""

FAKES: dict[str, str] = {"fake": "balagg.conformance.engines.fake:FakeEngine"}
"""The self-check's deliberately broken engine (run by name only)."""

NOT_ON_THE_INDEX: dict[str, str] = {
    "roll": "roll: not on the package index (the index's 'roll' is an unrelated project; Alibaba's ROLL is "
            "alibaba/ROLL on GitHub), so it is not checked; its agg_loss follows verl's mode names",
    "delta-l-normalization": "delta-l-normalization: ΔL Normalization's reference code is a verl fork "
                             "(zerolllin/Delta-L-Normalization), not on the package index; its arithmetic is "
                             "restated step by step in tests/test_aggregation.py",
}

__all__ = ["Adapter", "EngineUnavailable", "Option", "ENGINES", "FAKES", "NOT_ON_THE_INDEX", "adapter"]


def adapter(name: str) -> Adapter:
    """The adapter of engine ``name``; a ``ValueError`` naming the known engines otherwise."""
    path = ENGINES.get(name) or FAKES.get(name)
    if path is None:
        if name in NOT_ON_THE_INDEX:
            raise EngineUnavailable(NOT_ON_THE_INDEX[name])
        raise ValueError(f"unknown engine {name!r}; known engines: {', '.join(ENGINES)} (and {', '.join(FAKES)})")
    module, cls = path.split(":")
    return getattr(importlib.import_module(module), cls)()
