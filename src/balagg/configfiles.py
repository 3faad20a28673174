"""Campaign config files as the workflow reads them, for the commands that read them too (``plan``,
``tinyworld hub-cache``): YAML files merged key by key in order, later files winning, as
``snakemake --configfile a.yaml b.yaml`` merges them (nested mappings merged, other values replaced).

A file that is missing or not valid YAML is one line naming the file, the line and the column. (Snakemake
9.27 loads ``--configfile`` before any workflow code runs and says only "Config file is not valid JSON or
YAML", so ``python -m balagg plan --configfile FILE`` is the way to find the line.)
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any


def read_yaml(path: str | os.PathLike) -> dict[str, Any]:
    """The mapping in one YAML file ({} for an empty file); ValueError in one line otherwise."""
    import yaml

    path = Path(path)
    if not path.is_file():
        raise ValueError(f"config file {path} does not exist")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f":{mark.line + 1}:{mark.column + 1}" if mark is not None else ""
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        raise ValueError(f"{path}{where}: not valid YAML ({problem})") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a config file must hold a mapping, not a {type(data).__name__}")
    return data


def merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """``extra`` merged into ``base`` (in place, returned): mappings recursively, anything else replaced."""
    for key, value in extra.items():
        base[key] = merge(base[key], value) if isinstance(value, dict) and isinstance(base.get(key), dict) else value
    return base


def merged_config(paths: list[str | os.PathLike]) -> dict[str, Any]:
    """The config of ``snakemake --configfile PATHS...`` before the schema fills in defaults."""
    config: dict[str, Any] = {}
    for path in paths:
        merge(config, read_yaml(path))
    return config
