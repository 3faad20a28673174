"""What each job of a model asks the scheduler for: the ``train_resources`` / ``generate_resources`` of the
config's model (or external checkpoint) entry, each key defaulting to :data:`RESOURCE_DEFAULTS`."""

from __future__ import annotations

RESOURCE_KEYS = ("gpus", "cpus", "mem_mb", "runtime")
RESOURCE_DEFAULTS = {"gpus": 0, "cpus": 1, "mem_mb": 4000, "runtime": 60}
"""A job's resources where its model sets none: GPUs (0 = CPU), CPUs, memory in MB, time limit in minutes.
The schema's ``$defs/resources`` states the same defaults for a section that is given."""

RESOURCE_RULES = ("train_resources", "generate_resources")
"""The model keys holding resources: the train job's, and each evaluation (generate) job's."""


def resource(spec: dict, rule_key: str, key: str) -> int:
    """Resource ``key`` of ``rule_key`` (one of :data:`RESOURCE_RULES`) in a model's config entry ``spec``."""
    if rule_key not in RESOURCE_RULES or key not in RESOURCE_KEYS:
        raise KeyError(f"no resource {rule_key}.{key}")
    return spec.get(rule_key, {}).get(key, RESOURCE_DEFAULTS[key])
