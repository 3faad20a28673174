"""balagg: the paper's pipeline as one DAG.

    data (tiny world or real datasets) -> train every cell -> generate + score every checkpoint
    -> per-cell curves -> Table 1, Figures 1-3, diagnosis; MLflow alongside.

`snakemake --cores all` runs the embedded default (configs/default.yaml); `snakemake --profile slurm
--configfile configs/paper.yaml` runs the paper's grid on a Slurm cluster. See README.
"""

from snakemake.utils import min_version

min_version("9.0")


# The embedded default, unless config files are given (`--configfile configs/paper.yaml [more.yaml]`):
# Snakemake would otherwise merge the grids (models, datasets) of both files into one.
if not workflow.overwrite_configfiles:

    configfile: "configs/default.yaml"


# `--config seeds=[0,1]` hands the list items over as strings.
if isinstance(config.get("seeds"), list):
    config["seeds"] = [int(s) if isinstance(s, str) and s.isdigit() else s for s in config["seeds"]]


include: "workflow/rules/common.smk"


wildcard_constraints:
    **layout.WILDCARDS,  # model, dataset, aggregator (the registry's rules), seed, step
    kind=r"train|bench",
    family="|".join(layout.TINYWORLD_FAMILIES[1:]),  # a family folder (the default family has none)
    run=RUN_PATTERN,


include: "workflow/rules/fetch.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/evaluate.smk"
include: "workflow/rules/tracking.smk"
include: "workflow/rules/analysis.smk"
include: "workflow/rules/plan.smk"
include: "workflow/rules/report.smk"


rule all:
    default_target: True
    input:
        targets.campaign_targets(GRID),
        f"{RESULTS}/report.html",


onsuccess:
    from balagg.data.prepare import bad_rows_summary

    for line in bad_rows_summary(GRID.data_reports()):
        print(f"WARNING: {line}")
