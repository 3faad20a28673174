"""What an engine adapter is: the engine's options, how to import its loss code, how to run one rank.

An adapter never re-implements an engine's loss or reduction: it calls the engine's functions, and writes
out only the bookkeeping around them that lives in a trainer loop it cannot run here (how the loop scales a
micro-batch's loss before ``backward``), each such line citing the engine file it follows.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from balagg.conformance.probe import RankStep


class EngineUnavailable(Exception):
    """The engine cannot be checked here; the message is one line naming the engine and what to do."""


@dataclass(frozen=True)
class Option:
    """One aggregation option of an engine, under one setting."""

    option: str
    """the engine's name of it, e.g. ``loss_agg_mode=token-mean``"""
    setting: str = "default"
    """how the engine is driven (e.g. which worker path, whether global counts are passed)"""
    claims: str | None = None
    """the balagg rule the option's name and docs promise (None: no promise to check)"""
    issues: tuple[str, ...] = ()
    """the engine's issues about this option, named in a finding when the measurement deviates"""
    note: str = ""
    """what a reader of a finding needs to know about the setting (added to the finding)"""
    values: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)
    """what the adapter needs to run it"""

    @property
    def label(self) -> str:
        return self.option if self.setting == "default" else f"{self.option} ({self.setting})"


class Adapter:
    """Base class of the engine adapters (one module each under :mod:`balagg.conformance.engines`)."""

    name: str = ""
    """the engine's name on the command line"""
    distribution: str = ""
    """its package on the index (for the version)"""
    pinned: str = ""
    """the version the adapter is written against"""
    install: str = ""
    """what to run to install it (a line a user can follow)"""
    packs: bool = False
    """its loss takes packed rows"""
    fake: bool = False
    """a deliberately built engine of the self-check, not a real one"""

    def __getstate__(self) -> dict[str, Any]:
        """An adapter travels to the gloo ranks unloaded (each rank calls :meth:`load`)."""
        return {}

    def version(self) -> str:
        if not self.distribution:
            return "-"
        try:
            return importlib.metadata.version(self.distribution)
        except importlib.metadata.PackageNotFoundError:
            return "-"

    def load(self) -> None:
        """Import the engine's loss code (raise :class:`EngineUnavailable` with one line if it cannot)."""

    def options(self) -> list[Option]:
        raise NotImplementedError

    def run_rank(self, option: Option, step: RankStep) -> None:
        """Run the engine's loss over this rank's micro-batches, calling ``backward`` as the engine does."""
        raise NotImplementedError

    # helpers for the adapters -------------------------------------------------------------------------

    def unavailable(self, what: str) -> EngineUnavailable:
        return EngineUnavailable(f"{self.name}: {what}")

    def import_module(self, module: str) -> Any:
        """``importlib.import_module``, with a missing engine reported in one line."""
        try:
            return importlib.import_module(module)
        except ModuleNotFoundError as error:
            if self.version() == "-":
                raise self.unavailable(f"not installed; {self.install}") from None
            raise self.unavailable(f"{module} does not import: {error}; install what it needs, or "
                                   f"{self.install}") from None
        except Exception as error:  # an engine that imports something broken: one line
            raise self.unavailable(f"{module} does not import: {type(error).__name__}: {error}".splitlines()[0]) \
                from None

    def prepare_imports(self, stubs: Sequence[str] = (), bare: Sequence[str] = ()) -> None:
        """Before importing an engine installed without its dependencies: check it is installed, serve the
        modules it imports but never uses by inert stubs, skip the package ``__init__``s in ``bare``
        (:mod:`balagg.conformance.engines.stubs`)."""
        from balagg.conformance.engines.stubs import bare_packages, inert_modules

        if self.version() == "-":
            raise self.unavailable(f"not installed; {self.install}")
        inert_modules(stubs)
        try:
            bare_packages(bare)
        except Exception as error:
            raise self.unavailable(f"its packages do not import: {type(error).__name__}: {error}") from None

    def require(self, module: Any, function: str, parameters: Sequence[str]) -> Callable[..., Any]:
        """``module.function``, checked to take ``parameters``: a changed loss signature is one line."""
        target = getattr(module, function.split(".")[0], None)
        for part in function.split(".")[1:]:
            target = getattr(target, part, None)
        if target is None:
            raise self.unavailable(f"{module.__name__}.{function} is gone in {self.distribution} {self.version()}; "
                                   f"the adapter is written for {self.pinned} (pip install "
                                   f"'{self.distribution}=={self.pinned}', or update balagg.conformance.engines."
                                   f"{self.name})")
        try:
            names = set(inspect.signature(target).parameters)
        except (TypeError, ValueError):
            names = set(parameters)
        missing = [p for p in parameters if p not in names]
        if missing:
            raise self.unavailable(f"{module.__name__}.{function} changed its signature in {self.distribution} "
                                   f"{self.version()} (no {', '.join(missing)}); the adapter is written for "
                                   f"{self.pinned} (pip install '{self.distribution}=={self.pinned}', or update "
                                   f"balagg.conformance.engines.{self.name})")
        return target

    def option(self, name: str) -> Option:
        """The option called ``name`` (its option or label), or one line listing the engine's options."""
        for option in self.options():
            if name in (option.option, option.label):
                return option
        raise self.unavailable(f"has no option {name!r}; its options: "
                               + ", ".join(option.label for option in self.options()))
