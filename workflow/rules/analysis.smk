# Analysis rules: Table 1, Figures 1-3 and the length diagnosis of one campaign, one rule per artifact,
# each running its script in analysis/ (runnable by hand with the same arguments).
#
# Inputs: every cell's eval/curve.csv and manifest.json (its train/metrics.jsonl is complete once the
# manifest exists); the scripts find the cells from these paths and mark any gap (failed cell, missing
# checkpoint) rather than fill it. Settings: the config's `analysis` section (workflow/schemas).
#
# Outputs go to results/{campaign}/analysis/, logs to results/{campaign}/logs/analysis/; figures and
# tables are registered with report(), so `snakemake --report report.html` shows them.

ANALYSIS = config["analysis"]
ANALYSIS_SCRIPTS = f"{workflow.basedir}/analysis"
ANALYSIS_REPORT = "../report"
ANALYSIS_OUT = os.path.join(RESULTS, layout.ANALYSIS_DIR)
ANALYSIS_LOGS = f"{RESULTS}/logs/{layout.ANALYSIS_DIR}"
ANALYSIS_BENCHMARKS = f"{RESULTS}/benchmarks/{layout.ANALYSIS_DIR}"
# every script reads the campaign folder and writes into its analysis folder
ANALYSIS_ARGS = f"--campaign-dir {RESULTS} --out {ANALYSIS_OUT}"



rule table1:
    """Table 1: peak and last-step Acc@8 / Best@8 per dataset x model x aggregator, and a row per external
    checkpoint (its checkpoint.json and the eval/curve.csv beside it)."""
    input:
        curves=lambda wildcards: GRID.cell_paths(CURVE),
        checkpoints=lambda wildcards: targets.external_paths(GRID, layout.EXTERNAL_RECORD_FILE),
        checkpoint_curves=lambda wildcards: targets.external_paths(GRID, CURVE),
        paper=[f"{workflow.basedir}/{ANALYSIS['paper_values']}"] if ANALYSIS.get("paper_values") else [],
    output:
        csv=report(targets.analysis_path(GRID, "table1", "csv"), caption=f"{ANALYSIS_REPORT}/table1.rst",
                   category="Table 1"),
        md=report(targets.analysis_path(GRID, "table1", "md"), caption=f"{ANALYSIS_REPORT}/table1.rst",
                  category="Table 1"),
        tex=targets.analysis_path(GRID, "table1", "tex"),
    conda:
        "../../envs/cpu.yaml"
    log:
        f"{ANALYSIS_LOGS}/table1.log",
    benchmark:
        f"{ANALYSIS_BENCHMARKS}/table1.tsv"
    params:
        script=f"{ANALYSIS_SCRIPTS}/table1.py",
        paper=lambda wildcards, input: f"--paper-values {input.paper}" if input.paper else "",
        cells=lambda wildcards, input: f"--cells {input.curves}" if input.curves else "",
        checkpoints=lambda wildcards, input: f"--checkpoints {input.checkpoints}" if input.checkpoints else "",
        # the benchmarks' prepare-data reports, written with the benchmark files every curve was scored on
        # (so before this job; a report that is not there is skipped): rows they lost go into the notes
        data_reports=" ".join(["--data-reports", *GRID.data_reports()]) if GRID.data_reports() else "",
    shell:
        f"python {{params.script}} {ANALYSIS_ARGS} {{params.cells}} {{params.checkpoints}} {{params.paper}}"
        f" {{params.data_reports}} > {{log}} 2>&1"


rule figure1:
    """Figure 1: per benchmark, peak and last-step Acc@8 of each aggregator, averaged over settings."""
    input:
        curves=lambda wildcards: GRID.cell_paths(CURVE),
    output:
        png=report(targets.analysis_path(GRID, "figure1", "png"), caption=f"{ANALYSIS_REPORT}/figure1.rst",
                   category="Figures"),
        pdf=targets.analysis_path(GRID, "figure1", "pdf"),
    conda:
        "../../envs/cpu.yaml"
    log:
        f"{ANALYSIS_LOGS}/figure1.log",
    benchmark:
        f"{ANALYSIS_BENCHMARKS}/figure1.tsv"
    params:
        script=f"{ANALYSIS_SCRIPTS}/figure1.py",
    shell:
        f"python {{params.script}} {ANALYSIS_ARGS} --cells {{input.curves}} > {{log}} 2>&1"


rule figure2:
    """Figure 2: policy-gradient loss over training, one panel per dataset, for one model."""
    input:
        manifests=lambda wildcards: GRID.cell_paths(layout.CELL_MANIFEST_FILE),
    output:
        png=report(targets.analysis_path(GRID, "figure2", "png"), caption=f"{ANALYSIS_REPORT}/figure2.rst",
                   category="Figures"),
        pdf=targets.analysis_path(GRID, "figure2", "pdf"),
    conda:
        "../../envs/cpu.yaml"
    log:
        f"{ANALYSIS_LOGS}/figure2.log",
    benchmark:
        f"{ANALYSIS_BENCHMARKS}/figure2.tsv"
    params:
        script=f"{ANALYSIS_SCRIPTS}/figure2.py",
        model=f"--model {ANALYSIS['figure2_model']}" if ANALYSIS["figure2_model"] else "",
        smoothing=ANALYSIS["smoothing"],
    shell:
        f"python {{params.script}} {ANALYSIS_ARGS} --cells {{input.manifests}} {{params.model}}"
        f" --smoothing {{params.smoothing}} > {{log}} 2>&1"


rule figure3:
    """Figure 3: response-length CV and positive-negative length gap over training."""
    input:
        manifests=lambda wildcards: GRID.cell_paths(layout.CELL_MANIFEST_FILE),
    output:
        png=report(targets.analysis_path(GRID, "figure3", "png"), caption=f"{ANALYSIS_REPORT}/figure3.rst",
                   category="Figures"),
        pdf=targets.analysis_path(GRID, "figure3", "pdf"),
    conda:
        "../../envs/cpu.yaml"
    log:
        f"{ANALYSIS_LOGS}/figure3.log",
    benchmark:
        f"{ANALYSIS_BENCHMARKS}/figure3.tsv"
    params:
        script=f"{ANALYSIS_SCRIPTS}/figure3.py",
        smoothing=ANALYSIS["smoothing"],
    shell:
        f"python {{params.script}} {ANALYSIS_ARGS} --cells {{input.manifests}}"
        f" --smoothing {{params.smoothing}} > {{log}} 2>&1"


rule diagnosis:
    """diagnosis.md: measured length statistics, the predicted and the observed better aggregation."""
    input:
        curves=lambda wildcards: GRID.cell_paths(CURVE),
        manifests=lambda wildcards: GRID.cell_paths(layout.CELL_MANIFEST_FILE),
    output:
        md=report(targets.analysis_path(GRID, "diagnosis", "md"), caption=f"{ANALYSIS_REPORT}/diagnosis.rst",
                  category="Diagnosis"),
        csv=targets.analysis_path(GRID, "diagnosis", "csv"),
    conda:
        "../../envs/cpu.yaml"
    log:
        f"{ANALYSIS_LOGS}/diagnosis.log",
    benchmark:
        f"{ANALYSIS_BENCHMARKS}/diagnosis.tsv"
    params:
        script=f"{ANALYSIS_SCRIPTS}/diagnosis.py",
        cv=ANALYSIS["cv_threshold"],
        gap=ANALYSIS["gap_threshold"],
    shell:
        f"python {{params.script}} {ANALYSIS_ARGS} --cells {{input.curves}} {{input.manifests}}"
        f" --cv-threshold {{params.cv}} --gap-threshold {{params.gap}} > {{log}} 2>&1"


rule comparison:
    """comparison.md: paired test over problems and seeds of every difference between two aggregators."""
    input:
        curves=lambda wildcards: GRID.cell_paths(CURVE),
    output:
        md=report(targets.analysis_path(GRID, "comparison", "md"), caption=f"{ANALYSIS_REPORT}/comparison.rst",
                  category="Diagnosis"),
        csv=targets.analysis_path(GRID, "comparison", "csv"),
    conda:
        "../../envs/cpu.yaml"
    log:
        f"{ANALYSIS_LOGS}/comparison.log",
    params:
        script=f"{ANALYSIS_SCRIPTS}/comparison.py",
    shell:
        f"python {{params.script}} {ANALYSIS_ARGS} --cells {{input.curves}} > {{log}} 2>&1"


rule mechanism:
    """Mechanism figure: side shares of the update mass and long/short per-token weights over training."""
    input:
        curves=lambda wildcards: GRID.cell_paths(CURVE),
        manifests=lambda wildcards: GRID.cell_paths(layout.CELL_MANIFEST_FILE),
    output:
        png=report(targets.analysis_path(GRID, "mechanism", "png"), caption=f"{ANALYSIS_REPORT}/mechanism.rst",
                   category="Figures"),
        pdf=targets.analysis_path(GRID, "mechanism", "pdf"),
        csv=targets.analysis_path(GRID, "mechanism", "csv"),
    conda:
        "../../envs/cpu.yaml"
    log:
        f"{ANALYSIS_LOGS}/mechanism.log",
    params:
        script=f"{ANALYSIS_SCRIPTS}/mechanism.py",
        smoothing=ANALYSIS["smoothing"],
    shell:
        f"python {{params.script}} {ANALYSIS_ARGS} --cells {{input.curves}} {{input.manifests}}"
        f" --smoothing {{params.smoothing}} > {{log}} 2>&1"
