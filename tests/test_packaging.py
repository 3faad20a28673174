"""balagg's core (the rules, their diagnostics, the `weights` command) installs and imports with torch
alone; the trainer, evaluation, workflow and engine plug-ins are extras (pyproject.toml)."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src"

# Heavy or engine packages that only the extras bring.
EXTRA_ONLY = ("transformers", "trl", "vllm", "accelerate", "datasets", "mlflow", "pandas", "matplotlib",
              "math_verify", "snakemake", "verl", "lighteval", "tokenizers")


def pyproject() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]


def test_core_requires_torch_alone_and_every_stack_is_an_extra():
    project = pyproject()
    assert [Requirement(r).name for r in project["dependencies"]] == ["torch"]
    extras = {name: {Requirement(r).name.lower() for r in reqs}
              for name, reqs in project["optional-dependencies"].items()}
    assert {"trl", "transformers", "accelerate"} <= extras["train"]
    assert {"math-verify", "transformers"} <= extras["eval"]
    assert {"snakemake", "mlflow", "pandas", "matplotlib"} <= extras["workflow"]
    assert extras["gpu"] == {"vllm"} and extras["verl"] == {"verl"}
    # verl pins transformers<5.11: the verl extra must not drag the trainer's transformers pin along
    assert not extras["verl"] & extras["train"]


def test_core_modules_import_no_extra():
    """Importing the rules, the CLI and running `weights` loads torch and nothing from the extras."""
    code = (
        "import sys, json\n"
        "import balagg.aggregation.rules, balagg.aggregation.weights, balagg.io, balagg.integrations\n"
        "from balagg.cli import main\n"
        "assert main(['weights', '--rewards', '1,0,0', '--lengths', '3,5,9']) == 0\n"
        f"print(json.dumps(sorted(m for m in {EXTRA_ONLY!r} if m in sys.modules)))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                            env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"})
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.splitlines()[-1]) == []


def installed_from_this_checkout() -> metadata.Distribution | None:
    """balagg's installed metadata, if pip installed this checkout (an egg-info on PYTHONPATH may come first)."""
    for dist in metadata.distributions(name="balagg"):
        direct = dist.read_text("direct_url.json")
        if direct and json.loads(direct).get("url") == REPO.as_uri():
            return dist
    return None


def test_installed_distribution_requires_torch_alone_without_extras():
    """The installed metadata (what `pip install balagg` resolves) names torch alone unconditionally;
    TRL, vLLM and transformers only under an extra. Runs where this checkout is pip-installed (CI)."""
    dist = installed_from_this_checkout()
    if dist is None:
        pytest.skip("balagg is not pip-installed from this checkout (metadata would be another tree's)")
    unconditional, conditional = [], {}
    for line in dist.requires or []:
        req = Requirement(line)
        if req.marker is None:
            unconditional.append(req.name.lower())
        else:
            conditional.setdefault(req.name.lower(), str(req.marker))
    assert unconditional == ["torch"]
    for name in ("trl", "vllm", "transformers"):
        assert "extra" in conditional[name], f"{name} is required outside an extra: {conditional[name]}"
