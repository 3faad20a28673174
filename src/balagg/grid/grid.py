"""A campaign as the workflow runs it, derived from its loaded config alone: the grid's cells, each cell's
resolved training config, the checkpoint steps, the data files the jobs prepare and read, and what each job
of a model asks the scheduler for.

The config is a :class:`balagg.campaign.Campaign` (:func:`balagg.campaign.load`: validated, every default
filled in, rule names canonical), as the Snakefile, ``balagg plan`` and the tests load it.
"""

from __future__ import annotations

import os
from dataclasses import MISSING, dataclass, fields
from functools import cached_property
from itertools import product
from pathlib import Path

from balagg import layout
from balagg.grid.resources import resource
from balagg.layout import Cell
from balagg.train.config import CellConfig

def _settings_of(config_class: type, *sections: dict) -> dict:
    """The keys of ``sections`` (later ones winning) that are fields of ``config_class`` and are set (not
    None): a job's settings taken from the config as they are, by name."""
    names = {field.name for field in fields(config_class)}
    return {key: value for section in sections for key, value in section.items() if key in names and value is not None}


@dataclass(frozen=True, order=True)
class DataFile:
    """One prepared training set (kind ``train``) or benchmark (kind ``bench``): one prepare_data job. A
    tiny-world source is prepared once per task family (``family``; None: any other source's one file)."""

    kind: str
    name: str
    family: str | None = None

    def path(self, make=layout.data_file) -> str:
        """The file relative to the campaign folder (``make=balagg.layout.data_report_file``: its report)."""
        return make(self.kind, self.name, self.family)


class Grid:
    """The campaign of a loaded config (module docstring); every method derives from it only."""

    def __init__(self, campaign):
        if not hasattr(campaign, "config"):
            raise TypeError("Grid takes a loaded campaign (balagg.campaign.load or resolve), not "
                            f"a {type(campaign).__name__}")
        self.campaign = campaign
        self.config = config = campaign.config
        self.name: str = config["campaign"]
        self.results: str = layout.campaign_dir(self.name)
        self.models: dict = config["models"]
        self.checkpoints: dict = config.get("checkpoints", {})
        self.benchmarks: list[str] = list(config["benchmarks"])

    # ---- cells

    @cached_property
    def cells(self) -> tuple[Cell, ...]:
        """Every cell: models x datasets x aggregators x seeds, in the config's order."""
        return tuple(Cell(*values) for values in product(self.models, self.config["datasets"],
                                                         self.config["aggregators"], self.config["seeds"]))

    def cell_dir(self, cell: Cell) -> str:
        return os.path.join(self.results, cell.relpath)

    def cell_paths(self, name: str) -> list[str]:
        """``name`` (relative to a cell folder) in every cell."""
        return [os.path.join(self.cell_dir(cell), name) for cell in self.cells]

    # ---- models

    def model_spec(self, name: str) -> dict:
        """The settings of a grid model or of an external checkpoint (the schema's model_settings)."""
        return self.models[name] if name in self.models else self.checkpoints[name]

    def evaluated_models(self) -> list[str]:
        """Every name whose evaluation the campaign runs: the grid's models and the external checkpoints."""
        return [*self.models, *self.checkpoints]

    def builds_model(self, model: str) -> bool:
        """Whether the workflow builds the model itself (a tiny-world model)."""
        return self.models[model]["path"] == layout.TINYWORLD_SOURCE

    def model_source(self, model: str) -> str:
        """Hub id or folder of the initial policy; tiny-world models are built under the campaign folder."""
        if self.builds_model(model):
            return os.path.join(self.results, layout.MODELS_DIR, model)
        return self.models[model]["path"]

    def tinyworld_size(self, model: str) -> str:
        """The tiny-world shape (balagg.tinyworld.model.SIZES) a model the workflow builds takes: its
        ``tinyworld_size``, else its name."""
        return self.models[model].get("tinyworld_size") or model

    def model_family(self, model: str) -> str:
        """The tiny-world task family of a model's problems (balagg.tinyworld.regimes.model_family)."""
        from balagg.tinyworld.regimes import model_family

        return model_family(self.model_spec(model))

    def resource(self, model: str, rule_key: str, key: str) -> int:
        """Resource ``key`` of ``rule_key`` (train_resources / generate_resources) of a model's jobs."""
        return resource(self.model_spec(model), rule_key, key)

    # ---- training

    def train_settings(self, model: str) -> dict:
        """The train section with the model's own overrides applied (what the config sets, no defaults).
        The schema types both sections alike and neither may hold a key that names the cell."""
        return {**(self.config.get("train") or {}), **(self.models[model].get("train") or {})}

    def full_train_settings(self, model: str) -> dict:
        """:meth:`train_settings` over every default of CellConfig."""
        defaults = {f.name: f.default for f in fields(CellConfig) if f.default is not MISSING}
        return {**defaults, **self.train_settings(model)}

    def checkpoint_steps(self, model: str) -> list[int]:
        """Steps with a weights-only checkpoint (0, every eval_every, the last), as the trainer saves them."""
        settings = self.full_train_settings(model)
        return CellConfig.checkpoint_steps_of(settings["total_steps"], settings["eval_every"])

    def tracking_uri(self) -> str:
        """The configured MLflow URI, or the campaign's SQLite file (absolute, so every job agrees)."""
        if self.config.get("tracking_uri"):
            return self.config["tracking_uri"]
        return "sqlite:///" + str(Path(self.results, "mlflow.db").resolve())

    def cell_config(self, cell: Cell) -> dict:
        """The resolved training config of a cell (its cell.json, what ``python -m balagg train --cell``
        reads): every field of CellConfig with the cell's value, defaults filled in (the scope from the
        aggregator). Resolved, so that a config change reruns exactly the cells whose training it changes
        (``train: {scope: group}`` only the token-agg cells; a key set to its default none). A bad
        combination raises ValueError."""
        spec = self.models[cell.model]
        values = {
            "model": self.model_source(cell.model),
            "model_name": cell.model,
            "dataset_name": cell.dataset,
            "train_files": [self.data_path(cell.model, "train", cell.dataset)],
            "aggregator": cell.aggregator,
            "seed": int(cell.seed),
            **_settings_of(CellConfig, spec),  # chat_template, answer_format, enable_thinking, context
            "num_processes": max(1, self.resource(cell.model, "train_resources", "gpus")),
            # the trainer stops at a resumable checkpoint before the job's own Slurm time limit
            "time_limit_minutes": self.resource(cell.model, "train_resources", "runtime"),
            "mlflow_tracking_uri": self.tracking_uri(),
            "mlflow_experiment": self.name,
            **({"prompt_template": spec["math_template"]} if "math_template" in spec else {}),
            **self.train_settings(cell.model),
        }
        return CellConfig.from_dict(values).to_dict()

    # ---- evaluation

    def generation_settings(self, model: str) -> dict:
        """What a generate job of ``model`` (a grid model or an external checkpoint) is given: the eval
        section's and the model's settings that are fields of :class:`GenerationConfig` (sampling; the chat
        template, prompt templates, answer format, enable_thinking and context, as its training has them)."""
        from balagg.evaluation.generation.requests import GenerationConfig

        return _settings_of(GenerationConfig, self.config["eval"], self.model_spec(model))

    def score_settings(self) -> dict:
        """What every score job is given: the eval section's settings that are fields of :class:`ScoreConfig`."""
        from balagg.evaluation.scoring.config import ScoreConfig

        return _settings_of(ScoreConfig, self.config["eval"])

    def evaluated_checkpoints(self, model: str) -> int:
        """Trained checkpoints a cell of ``model`` evaluates (step 0 is the initial model's, evaluated once)."""
        return len([step for step in self.checkpoint_steps(model) if step > 0])

    # ---- data

    def data_source(self, kind: str, name: str) -> str:
        """Hub id, local mirror or "tinyworld" of a training set (kind train) or benchmark (kind bench)."""
        return self.config["datasets"][name]["source"] if kind == "train" else self.config["benchmarks"][name]

    def data_loader(self, kind: str, name: str) -> str:
        """The registry name of balagg.data's loader: the dataset's ``loader``, or the benchmark itself."""
        return self.config["datasets"][name]["loader"] if kind == "train" else name

    def data_file(self, model: str, kind: str, name: str) -> DataFile:
        """The prepared file a model's jobs read: a tiny-world source in the model's family, else the one file."""
        family = self.model_family(model) if self.data_source(kind, name) == layout.TINYWORLD_SOURCE else None
        return DataFile(kind, name, family)

    def data_path(self, model: str, kind: str, name: str) -> str:
        """:meth:`data_file`'s path."""
        return os.path.join(self.results, self.data_file(model, kind, name).path(layout.data_file))

    def data_files(self, models=None) -> list[DataFile]:
        """The prepare_data jobs that ``models`` (default: every evaluated one) need, each once: their training
        sets (grid models only; an external checkpoint reads benchmarks only) and the benchmarks."""
        models = self.evaluated_models() if models is None else models
        return list(dict.fromkeys(
            self.data_file(model, kind, name)
            for model in models
            for kind, names in (("train", self.config["datasets"] if model in self.models else {}),
                                ("bench", self.benchmarks))
            for name in names))

    def prepare_source(self, data: DataFile) -> str:
        """What a prepare_data job reads: the hub id or local mirror, or the tiny world's raw folder of the
        file's family and loader."""
        source = self.data_source(data.kind, data.name)
        if source != layout.TINYWORLD_SOURCE:
            return source
        raw = layout.tinyworld_raw_dir(data.family)
        return os.path.join(self.results, raw, self.data_loader(data.kind, data.name))

    def raw_manifest(self, family: str) -> str:
        """The manifest of one family's raw tiny-world files (written last by ``tinyworld data``)."""
        return os.path.join(self.results, layout.tinyworld_raw_dir(family), layout.TINYWORLD_MANIFEST_FILE)

    def data_reports(self) -> list[str]:
        """The prepare-data report of every prepared file (bad rows skipped, and why)."""
        return [os.path.join(self.results, data.path(layout.data_report_file)) for data in self.data_files()]

    def tinyworld_cards(self) -> list[str]:
        """The card.json of every model the workflow builds itself (none for real models)."""
        built = [model for model in self.models if self.builds_model(model)]
        return [os.path.join(self.model_source(model), layout.MODEL_CARD_FILE) for model in built]

    def benchmark_folder_error(self) -> str | None:
        """Each model's benchmark files share one folder (generate and score take one --benchmarks-dir): a
        model of a family other than the default cannot mix tiny-world benchmarks with real ones. The
        config error, or None."""
        for model in self.evaluated_models():
            if len({os.path.dirname(self.data_path(model, "bench", name)) for name in self.benchmarks}) > 1:
                return (f"config: models.{model}: its {self.model_family(model)} benchmarks must all come from "
                        "the tiny world (benchmarks: ... tinyworld), not from " + ", ".join(
                            f"{n}: {self.config['benchmarks'][n]}" for n in self.benchmarks
                            if self.config["benchmarks"][n] != layout.TINYWORLD_SOURCE))
        return None
