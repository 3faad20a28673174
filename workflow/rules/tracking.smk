# MLflow: the database and experiment are created once, locally, before any job logs (a fresh SQLite
# store opened by many jobs at once races on its migrations). Files stay the source of truth.


rule mlflow_setup:
    output:
        f"{RESULTS}/mlflow/experiment.json",
    params:
        uri=GRID.tracking_uri(),
        experiment=CAMPAIGN,
        # a SQLite store keeps the campaign's artifacts beside it (a server keeps its own artifact root)
        artifacts=f"--artifact-location {RESULTS}/mlartifacts" if GRID.tracking_uri().startswith("sqlite:") else "",
    log:
        f"{RESULTS}/logs/mlflow_setup.log",
    benchmark:
        f"{RESULTS}/benchmarks/mlflow_setup.tsv"
    localrule: True
    conda:
        "../../envs/cpu.yaml"
    shell:
        "python -m balagg track setup --tracking-uri {params.uri} --experiment {params.experiment} {params.artifacts}"
        " --out {output} > {log} 2>&1"


rule mlflow_log_eval:
    """Evaluation metrics into the cell's run, at their training steps (eval/<benchmark>/acc_at_8, ...), and
    its training set and benchmarks as the run's dataset inputs (hub ones at fetch.json's revisions). An
    external checkpoint gets a run of its own, made from its checkpoint.json (which reads as a manifest)."""
    input:
        manifest=lambda wildcards: os.path.join(EVAL_RUN.format(**wildcards), layout.EXTERNAL_RECORD_FILE
                                                if wildcards.run == EXTERNAL else layout.CELL_MANIFEST_FILE),
        curve=f"{EVAL_RUN}/{CURVE}",
        benchmarks=model_benchmarks,
        fetch=[ancient(FETCH)] if USES_HUB else [],
        # a cell's store and experiment exist once it trained; an external checkpoint's run waits for them
        tracking=lambda wildcards: [f"{RESULTS}/mlflow/experiment.json"] if wildcards.run == EXTERNAL else [],
    output:
        f"{EVAL_RUN}/{targets.EVAL_TRACKING}",
    wildcard_constraints:
        run=CURVE_RUNS,
    params:
        fetch=lambda wildcards, input: f"--fetch {input.fetch}" if input.fetch else "",
    log:
        f"{EVAL_RUN}/logs/mlflow_log_eval.log",
    benchmark:
        f"{EVAL_RUN}/benchmarks/mlflow_log_eval.tsv"
    localrule: True
    conda:
        "../../envs/cpu.yaml"
    shell:
        "python -m balagg track eval --manifest {input.manifest} --curve {input.curve}"
        " --benchmark-data {input.benchmarks} {params.fetch} --out {output} > {log} 2>&1"


rule mlflow_log_analysis:
    """Table 1, the figures and the diagnosis as artifacts of the campaign's analysis run."""
    input:
        targets.analysis_targets(GRID),
    output:
        f"{RESULTS}/{layout.ANALYSIS_DIR}/{layout.EVAL_TRACKING_FILE}",
    params:
        uri=GRID.tracking_uri(),
        experiment=CAMPAIGN,
    log:
        f"{RESULTS}/logs/mlflow_log_analysis.log",
    benchmark:
        f"{RESULTS}/benchmarks/mlflow_log_analysis.tsv"
    localrule: True
    conda:
        "../../envs/cpu.yaml"
    shell:
        "python -m balagg track analysis --tracking-uri {params.uri} --experiment {params.experiment}"
        " --out {output} {input} > {log} 2>&1"
