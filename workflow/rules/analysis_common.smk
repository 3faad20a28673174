# Default input functions for workflow/rules/analysis.smk (helpers live apart from rules, as the linter
# wants). The lead may include this file, or define functions with the same names elsewhere.
#
#   analysis_cells(campaign)            -> list of cell folders results/{campaign}/{model}/{dataset}/{aggregator}/seed{seed}
#   analysis_curve_files(wildcards)     -> each cell's eval/curve.csv            (docs/files.md)
#   analysis_metrics_files(wildcards)   -> each cell's train/metrics.jsonl       (docs/files.md)
#   analysis_targets(campaign)          -> every output of the analysis rules (for `rule all`)
#
# The defaults read the grid from config keys `models`, `datasets`, `aggregators`, `seeds`: each a list
# of names (or of objects with a `name`), or a mapping whose keys are the names.


def _analysis_names(value):
    if isinstance(value, dict):
        return list(value)
    return [item["name"] if isinstance(item, dict) else item for item in value]


def analysis_cells(campaign):
    return [
        f"results/{campaign}/{model}/{dataset}/{aggregator}/seed{seed}"
        for model in _analysis_names(config["models"])
        for dataset in _analysis_names(config["datasets"])
        for aggregator in _analysis_names(config["aggregators"])
        for seed in _analysis_names(config["seeds"])
    ]


def analysis_curve_files(wildcards):
    return [f"{cell}/eval/curve.csv" for cell in analysis_cells(wildcards.campaign)]


def analysis_metrics_files(wildcards):
    return [f"{cell}/train/metrics.jsonl" for cell in analysis_cells(wildcards.campaign)]


def analysis_targets(campaign):
    folder = f"results/{campaign}/analysis"
    return [
        f"{folder}/table1.csv", f"{folder}/table1.md", f"{folder}/table1.tex",
        *(f"{folder}/figure{n}.{fmt}" for n in (1, 2, 3) for fmt in ("png", "pdf")),
        f"{folder}/diagnosis.md", f"{folder}/diagnosis.csv",
    ]
