# The campaign's HTML report, built by the workflow at the end: `snakemake --report` over this workflow
# with the same resolved config (written beside it), so it holds every result marked report() in the
# analysis rules: Table 1, Figures 1-3 and the diagnosis (`make demo` then prints its path).

import sys


rule report:
    """results/{campaign}/report.html: Snakemake's self-contained report of the campaign."""
    input:
        targets.campaign_targets(GRID),
    output:
        f"{RESULTS}/report.html",
    params:
        snakefile=workflow.main_snakefile,
        config=f"{RESULTS}/report/config.json",
    log:
        f"{RESULTS}/logs/report.log",
    benchmark:
        f"{RESULTS}/benchmarks/report.tsv"
    localrule: True
    run:
        write_json(params.config, config)
        shell(f"{sys.executable} -m snakemake --snakefile {{params.snakefile}} --configfile {{params.config}}"
              " --report {output} --nolock > {log} 2>&1")
