"""balagg's rules inside other RL engines. Each submodule is an optional extra that imports its engine;
this package itself imports nothing (the core installs with torch alone).

- :mod:`balagg.integrations.verl`: advantage estimators and a policy loss registered with verl's own
  registries (``pip install 'balagg[verl]'``; docs/verl.md).

Any other engine gets the same weights from one call, :func:`balagg.aggregation.aggregation_weights`.
"""
