# Data: the tiny world (when a source is "tinyworld") and normalised JSONL for every training set and
# benchmark (docs/files.md). The tiny world's files are per task family: a tiny model's family is its
# warm start's (model_family); the default family (chains) has no family folder, the others (walks) live
# under tinyworld/{family}/raw/ and data/{family}/ (the *_family rules, the same commands).


rule tinyworld_data:
    """Synthetic training sets and benchmarks in the real datasets' raw schemas (the default family)."""
    output:
        manifest=GRID.raw_manifest(layout.TINYWORLD_DEFAULT_FAMILY),
    params:
        out=output_dir,
        seed=config["tinyworld"]["seed"],
        train_problems=config["tinyworld"]["train_problems"],
        bench_problems=config["tinyworld"]["bench_problems"],
        family=layout.TINYWORLD_DEFAULT_FAMILY,
    log:
        f"{RESULTS}/logs/tinyworld_data.log",
    benchmark:
        f"{RESULTS}/benchmarks/tinyworld_data.tsv"
    conda:
        "../../envs/cpu.yaml"
    shell:
        "python -m balagg tinyworld data --out {params.out} --seed {params.seed}"
        " --train-problems {params.train_problems} --bench-problems {params.bench_problems}"
        " --family {params.family} > {log} 2>&1"


use rule tinyworld_data as tinyworld_data_family with:
    output:
        manifest=GRID.raw_manifest("{family}"),
    params:
        family=lambda wildcards: wildcards.family,
    log:
        f"{RESULTS}/logs/tinyworld_data-{{family}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/tinyworld_data-{{family}}.tsv"


rule tinyworld_model:
    """A tiny Qwen2 model, warm-started by supervised training on its family's problems, with its step-0
    data card."""
    input:
        raw=lambda wildcards: GRID.raw_manifest(GRID.model_family(wildcards.model)),
    output:
        card=os.path.join(RESULTS, layout.MODELS_DIR, "{model}", layout.MODEL_CARD_FILE),
    params:
        out=output_dir,
        raw=lambda wildcards, input: os.path.dirname(input.raw),
        size=lambda wildcards: GRID.tinyworld_size(wildcards.model),
        seed=config["tinyworld"]["seed"],
        sft_steps=config["tinyworld"]["sft_steps"],
        sft_length_buckets=config["tinyworld"]["sft_length_buckets"],
        regime=lambda wildcards: arguments.tinyworld_regime_arg(GRID.models[wildcards.model]),
        answer_format=lambda wildcards: GRID.models[wildcards.model].get("answer_format", prompts.DEFAULT_ANSWER_FORMAT),
    log:
        f"{RESULTS}/logs/tinyworld_model/{{model}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/tinyworld_model/{{model}}.tsv"
    # the warm starts are the longest jobs and every cell waits for one: they start before the short
    # set-up jobs (data preparation, MLflow), which fit beside them
    priority: 10
    conda:
        "../../envs/cpu.yaml"
    shell:
        "python -m balagg tinyworld model --size {params.size} --raw {params.raw} --seed {params.seed}"
        " --sft-steps {params.sft_steps} --sft-length-buckets {params.sft_length_buckets} {params.regime}"
        " --answer-format {params.answer_format}"
        " --out {params.out} > {log} 2>&1"


rule prepare_data:
    """One normalised JSONL per training set (kind train) or benchmark (kind bench)."""
    input:
        data_inputs,
    output:
        data=os.path.join(RESULTS, layout.data_file("{kind}", "{name}")),
        counts=os.path.join(RESULTS, layout.data_report_file("{kind}", "{name}")),
    params:
        selector=lambda wildcards: arguments.data_selector(
            wildcards.kind, wildcards.name, GRID.data_loader(wildcards.kind, wildcards.name)),
        source=lambda wildcards: GRID.prepare_source(prepare_job(wildcards)),
        on_bad_row=config["data"]["on_bad_row"],
    log:
        f"{RESULTS}/logs/prepare_data/{{kind}}-{{name}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/prepare_data/{{kind}}-{{name}}.tsv"
    conda:
        "../../envs/cpu.yaml"
    shell:
        "python -m balagg prepare-data {params.selector} --source {params.source}"
        " --on-bad-row {params.on_bad_row} --out {output.data} --report {output.counts} > {log} 2>&1"


use rule prepare_data as prepare_data_family with:
    output:
        data=os.path.join(RESULTS, layout.data_file("{kind}", "{name}", "{family}")),
        counts=os.path.join(RESULTS, layout.data_report_file("{kind}", "{name}", "{family}")),
    log:
        f"{RESULTS}/logs/prepare_data/{{family}}/{{kind}}-{{name}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/prepare_data/{{family}}/{{kind}}-{{name}}.tsv"


rule tinyworld_card:
    """The campaign's data card: every tiny model's step-0 statistics (accuracy, length CV, right/wrong lengths)
    and the bad rows prepare_data skipped."""
    input:
        cards=GRID.tinyworld_cards(),
        counts=GRID.data_reports(),
    output:
        f"{RESULTS}/{layout.DATA_DIR}/{layout.MODEL_CARD_FILE}",
    log:
        f"{RESULTS}/logs/tinyworld_card.log",
    benchmark:
        f"{RESULTS}/benchmarks/tinyworld_card.tsv"
    localrule: True
    conda:
        "../../envs/cpu.yaml"
    shell:
        "python -m balagg tinyworld card --cards {input.cards} --data-reports {input.counts} --out {output}"
        " > {log} 2>&1"
