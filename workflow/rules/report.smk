# The campaign's HTML report, built by the workflow at the end: `snakemake --report` over this workflow
# with the same resolved config (written beside it), so it holds every result marked report() in the
# analysis rules: Table 1, Figures 1-3 and the diagnosis (`make demo` then prints its path). It opens on
# a landing page with Table 1 and the figures (--report-metadata: balagg.analysis.report_page), not on
# Snakemake's rule graph, which stays in its menu.

import sys

LANDING = f"{RESULTS}/report/landing.rst"
if os.path.exists(LANDING):  # written by the report rule before it runs `snakemake --report`

    report: os.path.abspath(LANDING)


rule report:
    """results/{campaign}/report.html: Snakemake's self-contained report of the campaign."""
    input:
        targets.campaign_targets(GRID),
    output:
        f"{RESULTS}/report.html",
    params:
        snakefile=workflow.main_snakefile,
        config=f"{RESULTS}/report/config.json",
        landing=LANDING,
        metadata=f"{RESULTS}/report/landing.yaml",
    log:
        f"{RESULTS}/logs/report.log",
    benchmark:
        f"{RESULTS}/benchmarks/report.tsv"
    localrule: True
    run:
        from balagg.analysis.report_page import write_landing  # pandas: only when the report is built

        write_json(params.config, config)
        write_landing(RESULTS, params.landing, params.metadata)
        shell(f"{sys.executable} -m snakemake --snakefile {{params.snakefile}} --configfile {{params.config}}"
              " --report {output} --report-metadata {params.metadata} --nolock > {log} 2>&1")
