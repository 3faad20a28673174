"""What every job of a campaign runs with: this checkout's code, and hub ids offline from the shared cache
that the fetch rule fills (``hf_home``)."""

from __future__ import annotations

import os
import shlex
from pathlib import Path

from balagg import external_checkpoints as externals
from balagg.hub import is_hub_id


def hub_models(config: dict) -> list[str]:
    """Hub ids of the config's models (the rest are built here or local folders), and of its external
    checkpoints pinned as ``org/name@revision``."""
    pinned = [externals.pinned(spec["path"], spec["revision"]) for spec in config.get("checkpoints", {}).values()
              if spec.get("revision") and is_hub_id(spec["path"])]
    return list(dict.fromkeys([*(spec["path"] for spec in config["models"].values() if is_hub_id(spec["path"])),
                               *pinned]))


def hub_datasets(config: dict) -> dict[str, str]:
    """{registry name: hub id} of the config's training sets and benchmarks that come from the hub."""
    found = {spec["loader"]: spec["source"] for spec in config["datasets"].values() if is_hub_id(spec["source"])}
    return found | {name: source for name, source in config["benchmarks"].items() if is_hub_id(source)}


def uses_hub(config: dict) -> bool:
    return bool(hub_models(config) or hub_datasets(config))


def fetch_args(config: dict) -> str:
    """``python -m balagg fetch`` arguments for every hub model and dataset of the config."""
    args = [f"--model {shlex.quote(m)}" for m in hub_models(config)]
    args += [f"--dataset {shlex.quote(f'{name}={repo}')}" for name, repo in hub_datasets(config).items()]
    return " ".join(args)


def hf_home(config: dict) -> str:
    """The shared hub cache (HF_HOME) that fetch fills and every job reads: the config's ``hf_home``, else
    the submit host's HF_HOME, else huggingface_hub's default; absolute, so every node agrees."""
    home = config.get("hf_home") or os.environ.get("HF_HOME") or os.path.join("~", ".cache", "huggingface")
    return str(Path(os.path.expanduser(home)).resolve())


def job_environment(config: dict, src: str | os.PathLike) -> str:
    """The shell prefix of every rule. PYTHONPATH: the checkout's ``src`` first, so jobs run this code
    whatever environment runs them (Snakemake drops an inherited PYTHONPATH under --sdm conda, and the conda
    envs hold dependencies only). With hub sources: HF_HOME/HF_HUB_CACHE = the shared cache and
    HF_HUB_OFFLINE=1 (compute nodes read what fetch stored; fetch itself sets HF_HUB_OFFLINE back)."""
    exports = [f'export PYTHONPATH={shlex.quote(str(src))}"${{{{PYTHONPATH:+:$PYTHONPATH}}}}"']
    if uses_hub(config):
        home = shlex.quote(hf_home(config))
        exports += [f"export HF_HOME={home}", f"export HF_HUB_CACHE={home}/hub", "export HF_HUB_OFFLINE=1"]
    return "set -euo pipefail; " + "; ".join(exports) + "; "
