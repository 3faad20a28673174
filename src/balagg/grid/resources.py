"""What each job of a model asks the scheduler for: the ``train_resources`` / ``generate_resources`` of the
config's model (or external checkpoint) entry, each key defaulting to :class:`Resources`' default."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from balagg.config_schema import Checked, setting


@dataclass(frozen=True)
class Resources(Checked):
    """One job's resources: a section given in part is completed by these defaults, and an absent one is
    these defaults."""

    config_name = "resources"

    gpus: int = setting(0, "GPUs per job (0 = CPU)", minimum=0)
    cpus: int = setting(1, minimum=1)
    mem_mb: int = setting(4000, minimum=100)
    runtime: int = setting(60, "time limit in minutes", minimum=1)
    gpu_memory_gb: int = setting(80, "memory of each of the job's GPUs as its maker states it (the paper's H100s: "
                                 "80); balagg plan sizes the job's GPU memory against it, not the scheduler",
                                 minimum=1)


RESOURCE_DEFAULTS: dict[str, int] = {field.name: field.default for field in dataclasses.fields(Resources)}
"""A job's resources where its model sets none."""

RESOURCE_RULES = ("train_resources", "generate_resources")
"""The model keys holding resources: the train job's, and each evaluation (generate) job's."""


def resource(spec: dict, rule_key: str, key: str) -> int:
    """Resource ``key`` of ``rule_key`` (one of :data:`RESOURCE_RULES`) in a model's config entry ``spec``."""
    if rule_key not in RESOURCE_RULES or key not in RESOURCE_DEFAULTS:
        raise KeyError(f"no resource {rule_key}.{key}")
    return spec.get(rule_key, {}).get(key, RESOURCE_DEFAULTS[key])
