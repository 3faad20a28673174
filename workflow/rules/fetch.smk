# Fetch: every hub model and dataset of the config, snapshotted once on the submit host into the shared
# cache (hf_home); compute jobs read them offline (HF_HUB_OFFLINE=1, common.smk's shell prefix).


rule fetch:
    """Snapshot the config's hub models and datasets into the shared cache; fetch.json records their
    commits (the campaign's revisions). Run by hand: python -m balagg fetch --help."""
    output:
        FETCH,
    params:
        hf_home=environment.hf_home(config),
        repos=environment.fetch_args(config),
    log:
        f"{RESULTS}/logs/fetch.log",
    localrule: True
    conda:
        "../../envs/cpu.yaml"
    shell:
        # the submit host's HF_HUB_OFFLINE (common.smk), not the jobs' 1: fetch is what may download. Read
        # from the environment, not a param, so a change of it alone reruns nothing.
        "HF_HUB_OFFLINE=$BALAGG_FETCH_OFFLINE python -m balagg fetch --hf-home {params.hf_home:q} {params.repos}"
        " --out {output} > {log} 2>&1"
