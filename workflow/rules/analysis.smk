# Analysis rules: Table 1, Figures 1-3 and the length diagnosis of one campaign, one rule per artifact,
# each running its script in analysis/ (runnable by hand with the same arguments).
#
# Needs, defined before this file is included (workflow/rules/analysis_common.smk has defaults):
#   analysis_curve_files(wildcards)    -> the grid's results/{campaign}/.../eval/curve.csv files
#   analysis_metrics_files(wildcards)  -> the grid's results/{campaign}/.../train/metrics.jsonl files
# Only the listed cells make up the grid; the scripts mark any gap (failed cell, missing checkpoint).
#
# Optional config (all keys optional):
#   analysis:
#     paper_values: analysis/paper_values.csv   # path from the repo root; set it for the paper campaign only
#     figure2_model: Qwen2.5-Math-7B            # the model of Figure 2 (default: the campaign's first)
#     smoothing: 5                              # Figure 2 moving-average window, in logged steps
#     cv_threshold: 0.5                         # diagnosis: length CV counted as high (ours)
#     gap_threshold: 0.25                       # diagnosis: |len_gap| / len_mean counted as large (ours)
#
# Outputs go to results/{campaign}/analysis/, logs to results/{campaign}/logs/analysis/; figures and
# tables are registered with report(), so `snakemake --report report.html` shows them.

ANALYSIS = config.get("analysis") or {}
ANALYSIS_SCRIPTS = f"{workflow.basedir}/analysis"
ANALYSIS_REPORT = "../report"


rule analysis_table1:
    """Table 1: peak and last-step Acc@8 / Best@8 per dataset x model x aggregator."""
    input:
        curves=analysis_curve_files,
        paper=[f"{workflow.basedir}/{ANALYSIS['paper_values']}"] if ANALYSIS.get("paper_values") else [],
    output:
        csv=report("results/{campaign}/analysis/table1.csv", caption=f"{ANALYSIS_REPORT}/table1.rst",
                   category="Table 1"),
        md=report("results/{campaign}/analysis/table1.md", caption=f"{ANALYSIS_REPORT}/table1.rst",
                  category="Table 1"),
        tex="results/{campaign}/analysis/table1.tex",
    log:
        "results/{campaign}/logs/analysis/table1.log",
    params:
        script=f"{ANALYSIS_SCRIPTS}/table1.py",
        paper=lambda wildcards, input: f"--paper-values {input.paper}" if input.paper else "",
    shell:
        "python {params.script} --campaign-dir results/{wildcards.campaign} "
        "--out results/{wildcards.campaign}/analysis --cells {input.curves} {params.paper} > {log} 2>&1"


rule analysis_figure1:
    """Figure 1: per benchmark, peak and last-step Acc@8 of each aggregator, averaged over settings."""
    input:
        curves=analysis_curve_files,
    output:
        png=report("results/{campaign}/analysis/figure1.png", caption=f"{ANALYSIS_REPORT}/figure1.rst",
                   category="Figures"),
        pdf="results/{campaign}/analysis/figure1.pdf",
    log:
        "results/{campaign}/logs/analysis/figure1.log",
    params:
        script=f"{ANALYSIS_SCRIPTS}/figure1.py",
    shell:
        "python {params.script} --campaign-dir results/{wildcards.campaign} "
        "--out results/{wildcards.campaign}/analysis --cells {input.curves} > {log} 2>&1"


rule analysis_figure2:
    """Figure 2: policy-gradient loss over training, one panel per dataset, for one model."""
    input:
        metrics=analysis_metrics_files,
    output:
        png=report("results/{campaign}/analysis/figure2.png", caption=f"{ANALYSIS_REPORT}/figure2.rst",
                   category="Figures"),
        pdf="results/{campaign}/analysis/figure2.pdf",
    log:
        "results/{campaign}/logs/analysis/figure2.log",
    params:
        script=f"{ANALYSIS_SCRIPTS}/figure2.py",
        model=f"--model {ANALYSIS['figure2_model']}" if ANALYSIS.get("figure2_model") else "",
        smoothing=ANALYSIS.get("smoothing", 5),
    shell:
        "python {params.script} --campaign-dir results/{wildcards.campaign} "
        "--out results/{wildcards.campaign}/analysis --cells {input.metrics} {params.model} "
        "--smoothing {params.smoothing} > {log} 2>&1"


rule analysis_figure3:
    """Figure 3: response-length CV and positive-negative length gap over training."""
    input:
        metrics=analysis_metrics_files,
    output:
        png=report("results/{campaign}/analysis/figure3.png", caption=f"{ANALYSIS_REPORT}/figure3.rst",
                   category="Figures"),
        pdf="results/{campaign}/analysis/figure3.pdf",
    log:
        "results/{campaign}/logs/analysis/figure3.log",
    params:
        script=f"{ANALYSIS_SCRIPTS}/figure3.py",
    shell:
        "python {params.script} --campaign-dir results/{wildcards.campaign} "
        "--out results/{wildcards.campaign}/analysis --cells {input.metrics} > {log} 2>&1"


rule analysis_diagnosis:
    """diagnosis.md: measured length statistics, the predicted and the observed better aggregation."""
    input:
        curves=analysis_curve_files,
        metrics=analysis_metrics_files,
    output:
        md=report("results/{campaign}/analysis/diagnosis.md", caption=f"{ANALYSIS_REPORT}/diagnosis.rst",
                  category="Diagnosis"),
        csv="results/{campaign}/analysis/diagnosis.csv",
    log:
        "results/{campaign}/logs/analysis/diagnosis.log",
    params:
        script=f"{ANALYSIS_SCRIPTS}/diagnosis.py",
        cv=ANALYSIS.get("cv_threshold", 0.5),
        gap=ANALYSIS.get("gap_threshold", 0.25),
    shell:
        "python {params.script} --campaign-dir results/{wildcards.campaign} "
        "--out results/{wildcards.campaign}/analysis --cells {input.curves} {input.metrics} "
        "--cv-threshold {params.cv} --gap-threshold {params.gap} > {log} 2>&1"
