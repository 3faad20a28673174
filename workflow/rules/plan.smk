# The campaign's cost before it runs (balagg.plan; also `python -m balagg plan --configfile ...`):
# `snakemake results/<campaign>/plan.txt`. Not part of the default target.


rule plan:
    """Jobs, GPUs, expected tokens and GPU-hours per cell and in total, from the config's plan section."""
    output:
        f"{RESULTS}/plan.txt",
    log:
        f"{RESULTS}/logs/plan.log",
    localrule: True
    run:
        from balagg.io import atomic_write_text
        from balagg.plan import format_plan

        atomic_write_text(output[0], format_plan(GRID.campaign) + "\n")
