"""Inert stand-ins for modules an engine imports but its loss code never uses (ray, loguru, deepspeed...).

``inert_modules(names)`` installs an import hook that serves every module under those top-level names,
*only when the real one is not installed*: each attribute of such a module is an inert class that can be
called, subclassed, subscripted and used as a decorator (a decorator returns the function unchanged).
``bare_packages(names)`` makes packages importable without running their ``__init__`` (an engine's package
``__init__`` that pulls in its whole trainer). Nothing here runs engine code; it only lets it import.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
from collections.abc import Iterable
from typing import Any


class _InertMeta(type):
    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        if len(args) == 1 and not kwargs and callable(args[0]):
            return args[0]  # used as a decorator
        return super().__call__(*args, **kwargs)

    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _inert(name)

    def __getitem__(cls, key: Any) -> Any:
        return cls

    def __or__(cls, other: Any) -> Any:
        return cls

    def __ror__(cls, other: Any) -> Any:
        return cls

    def __iter__(cls):
        return iter(())


class Inert(metaclass=_InertMeta):
    """An inert object: every call, attribute and item is inert too."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if len(args) == 1 and not kwargs and callable(args[0]):
            return args[0]
        return Inert()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return Inert()

    def __getitem__(self, key: Any) -> Any:
        return Inert()

    def __iter__(self):
        return iter(())

    def __bool__(self) -> bool:
        return False

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: Any) -> bool:
        return False


def _inert(name: str) -> type:
    return _InertMeta(name, (Inert,), {})


class _InertModule(types.ModuleType):
    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        value = _inert(name)
        setattr(self, name, value)
        return value


class _InertLoader(importlib.abc.Loader):
    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = _InertModule(spec.name)
        module.__path__ = []  # every stub is a package: its submodules are stubs too
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        pass


class _InertFinder(importlib.abc.MetaPathFinder):
    def __init__(self, names: Iterable[str]) -> None:
        self.names = set(names)

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname.split(".")[0] in self.names:
            return importlib.machinery.ModuleSpec(fullname, _InertLoader(), is_package=True)
        return None


STUBBED: set[str] = set()
"""The top-level names served by stubs in this process."""


def inert_modules(names: Iterable[str]) -> list[str]:
    """Serve each of ``names`` that is not installed by an inert stub; return those stubbed."""
    missing = [name for name in names if name not in STUBBED and name not in sys.modules
               and importlib.util.find_spec(name) is None]
    if missing:
        sys.meta_path.append(_InertFinder(missing))
        STUBBED.update(missing)
    return missing


def bare_packages(names: Iterable[str]) -> None:
    """Make each dotted package, and every package above it not yet imported, importable without executing
    its ``__init__`` (an engine's package ``__init__`` that pulls in its whole trainer)."""
    for name in names:
        parts = name.split(".")
        for depth in range(1, len(parts) + 1):
            package = ".".join(parts[:depth])
            if package in sys.modules:
                continue
            parent = sys.modules[".".join(parts[:depth - 1])].__path__ if depth > 1 else None
            spec = importlib.machinery.PathFinder.find_spec(package, parent)
            if spec is None or spec.submodule_search_locations is None:
                raise ModuleNotFoundError(f"no package {package}")
            module = types.ModuleType(package)
            module.__path__ = list(spec.submodule_search_locations)
            module.__spec__ = spec
            module.__file__ = spec.origin
            module.__package__ = package
            sys.modules[package] = module
