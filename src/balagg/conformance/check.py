"""Run the check for one engine: every option, every batch, every layout (:func:`check_engine`)."""

from __future__ import annotations

from balagg.conformance.batches import Batch
from balagg.conformance.compare import OptionResult, layouts_for, summarise
from balagg.conformance.engines.base import Adapter, EngineUnavailable, Option
from balagg.conformance.probe import Measurement, measure, measure_distributed


def _result(adapter: Adapter, option: Option) -> OptionResult:
    return OptionResult(adapter.name, adapter.version(), option.option, option.setting, option.claims, option.issues,
                        option.note, fake=adapter.fake)


def check_engine(adapter: Adapter, batches: list[Batch], options: list[Option] | None = None,
                 distributed: bool = True) -> list[OptionResult]:
    """Every option of ``adapter`` (or the given ones) over ``batches`` and the engine's layouts.

    Raises :class:`EngineUnavailable` (one line) when the engine cannot be imported. An option whose code
    raises is reported with that error and no match. ``distributed=False`` leaves out the gloo layout."""
    adapter.load()
    options = adapter.options() if options is None else options
    layouts = [layout for layout in layouts_for(adapter) if distributed or layout.ranks == 1]
    runs: dict[Option, dict[str, dict[int, Measurement]]] = {option: {} for option in options}
    errors: dict[Option, str] = {}
    jobs = []
    for option in options:
        for layout in layouts:
            if layout.ranks > 1:
                jobs += [((option, layout.name, batch.seed), option, batch, layout) for batch in batches]
                continue
            if option in errors:
                break
            try:
                runs[option][layout.name] = {batch.seed: measure(adapter, option, batch, layout) for batch in batches}
            except EngineUnavailable:
                raise
            except Exception as error:  # the engine's own code failed on this input
                errors[option] = f"{layout.name}: {type(error).__name__}: {error}".splitlines()[0]
    jobs = [job for job in jobs if job[1] not in errors]
    for (option, layout_name, seed), outcome in measure_distributed(adapter, jobs).items():
        if isinstance(outcome, str):
            errors.setdefault(option, f"{layout_name}: {outcome}")
        else:
            runs[option].setdefault(layout_name, {})[seed] = outcome
    by_name = {layout.name: layout for layout in layouts}
    results = []
    for option in options:
        result = _result(adapter, option)
        if option in errors:
            result.error = errors[option]
        else:
            summarise(result, runs[option], batches, by_name)
        results.append(result)
    return results
