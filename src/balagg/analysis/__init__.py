"""Analysis of a campaign's result files: Table 1, Figures 1-3 and the length diagnosis.

``results`` loads the per-cell files of docs/files.md and records every gap; ``seed_means`` computes
seed means, peaks and last steps; ``outputs`` holds what the scripts in ``analysis/`` share.
"""

from balagg.analysis.results import MEAN, CampaignResults, Cell, Problem, load_results
from balagg.analysis.seed_means import peak_and_last, smooth, train_curves

__all__ = ["MEAN", "CampaignResults", "Cell", "Problem", "load_results", "peak_and_last", "smooth",
           "train_curves"]
