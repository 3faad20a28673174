"""The FSDP2 mixed-precision policy of a training job: bf16 compute, gradients reduced in fp32.

accelerate builds FSDP2's ``MixedPrecisionPolicy`` from the accelerate config's top-level
``mixed_precision`` alone, with ``param_dtype = reduce_dtype`` (``FullyShardedDataParallelPlugin.
set_mixed_precision``): under ``mixed_precision: bf16`` every gradient would be reduce-scattered over the
GPUs in bf16, where verl's FSDP workers (the paper's engine) reduce in fp32. A config's
``fsdp_config.fsdp_mixed_precision_policy`` (``{param_dtype: bf16, reduce_dtype: fp32}``; accelerate's
launcher reads no such key, balagg does) names the two dtypes, and :func:`apply_policy` sets that policy on
the job's FSDP plugin before the model is sharded (the Trainer shards it when training starts). FSDP2 then
keeps fp32 master weights in its shards, computes with bf16 copies, and reduces the gradients in fp32.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

POLICY_KEY = "fsdp_mixed_precision_policy"
"""The key under the accelerate config's ``fsdp_config`` that balagg reads."""

DTYPE_NAMES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
"""accelerate's precision names -> torch dtype names."""


def _dtype(name: str):
    import torch

    return getattr(torch, DTYPE_NAMES[name])


def policy_settings(config_file: str | Path) -> dict[str, str] | None:
    """``{"param_dtype": ..., "reduce_dtype": ...}`` (accelerate's names: bf16, fp16, fp32) of the accelerate
    config ``config_file``; None when it is not an FSDP config or sets no policy (accelerate's own then
    applies). ``param_dtype`` must be the config's ``mixed_precision`` (the autocast dtype) and the FSDP
    version 2; anything else is a ValueError naming the file."""
    import yaml

    path = Path(config_file)
    try:
        settings = yaml.safe_load(path.read_text()) or {}
    except OSError as error:
        raise ValueError(f"accelerate config {path}: cannot be read ({error.strerror})") from None
    except yaml.YAMLError as error:
        raise ValueError(f"accelerate config {path} is not valid YAML: {error}") from None
    if not isinstance(settings, dict) or str(settings.get("distributed_type", "")).upper() != "FSDP":
        return None
    fsdp = settings.get("fsdp_config") or {}
    policy = fsdp.get(POLICY_KEY)
    if policy is None:
        return None
    if not isinstance(policy, dict) or set(policy) != {"param_dtype", "reduce_dtype"}:
        raise ValueError(f"accelerate config {path}: fsdp_config.{POLICY_KEY} must map exactly param_dtype and "
                         f"reduce_dtype to one of {', '.join(DTYPE_NAMES)}, got {policy!r}")
    bad = {key: value for key, value in policy.items() if value not in DTYPE_NAMES}
    if bad:
        raise ValueError(f"accelerate config {path}: fsdp_config.{POLICY_KEY} has unknown dtypes {bad}; "
                         f"valid: {', '.join(DTYPE_NAMES)}")
    if str(fsdp.get("fsdp_version")) != "2":
        raise ValueError(f"accelerate config {path}: fsdp_config.{POLICY_KEY} needs fsdp_version: 2, "
                         f"got {fsdp.get('fsdp_version')!r}")
    mixed = str(settings.get("mixed_precision", "no"))
    if DTYPE_NAMES.get(mixed, "float32") != DTYPE_NAMES[policy["param_dtype"]]:
        raise ValueError(f"accelerate config {path}: fsdp_config.{POLICY_KEY}.param_dtype "
                         f"{policy['param_dtype']} differs from mixed_precision {mixed}, the autocast dtype")
    return {"param_dtype": policy["param_dtype"], "reduce_dtype": policy["reduce_dtype"]}


def mixed_precision_policy(config_file: str | Path):
    """The ``torch.distributed.fsdp.MixedPrecisionPolicy`` of :func:`policy_settings`, or None."""
    settings = policy_settings(config_file)
    if settings is None:
        return None
    from torch.distributed.fsdp import MixedPrecisionPolicy

    return MixedPrecisionPolicy(param_dtype=_dtype(settings["param_dtype"]),
                                reduce_dtype=_dtype(settings["reduce_dtype"]))


def describe(policy) -> dict[str, Any]:
    """The policy's fields as JSON values (dtype names), for the manifest."""
    def name(dtype):
        return None if dtype is None else str(dtype).removeprefix("torch.")

    return {"param_dtype": name(policy.param_dtype), "reduce_dtype": name(policy.reduce_dtype),
            "output_dtype": name(getattr(policy, "output_dtype", None)),
            "cast_forward_inputs": getattr(policy, "cast_forward_inputs", None)}


def apply_policy(accelerator, config_file: str | Path | None) -> dict[str, Any] | None:
    """Set the policy of ``config_file`` on ``accelerator``'s FSDP plugin (call it before the model is
    prepared) and return the policy the job shards with (:func:`describe`): the config's, else accelerate's
    own. None when accelerate runs no FSDP (DDP, or its CPU fallback): the gradients are then those of the
    fp32 parameters, reduced in fp32."""
    plugin = getattr(accelerator.state, "fsdp_plugin", None)
    if plugin is None:
        return None
    policy = mixed_precision_policy(config_file) if config_file else None
    if policy is not None:
        if getattr(plugin, "fsdp_version", 1) != 2:
            raise ValueError(f"accelerate config {config_file}: {POLICY_KEY} needs FSDP2, but accelerate runs "
                             f"FSDP version {plugin.fsdp_version}")
        plugin.mixed_precision_policy = policy
    current = plugin.mixed_precision_policy
    if current is None:
        from torch.distributed.fsdp import MixedPrecisionPolicy

        current = MixedPrecisionPolicy()  # what accelerate shards with when it has none
    return describe(current)
