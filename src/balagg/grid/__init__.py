"""A campaign as the workflow runs it, in Python: its cells (:class:`Cell`), each cell's resolved training
config, checkpoint steps, data jobs, resources and targets (:class:`Grid`), derived from the validated
config alone. ``workflow/rules/*.smk`` turn it into rules; ``balagg.plan`` costs it; the analysis names
cells by :class:`Cell`."""

from balagg.grid.grid import DataFile, Grid
from balagg.layout import Cell
from balagg.grid.resources import RESOURCE_DEFAULTS

__all__ = ["Cell", "DataFile", "Grid", "RESOURCE_DEFAULTS"]
