"""How the public modules import: each name on first use (PEP 562), shown as living where the
documentation says it does.

A public module maps its names to the private modules that define them; the first lookup
imports that module, gives the object the public module as its ``__module__`` (as anyio does
for its re-exports: tracebacks, ``repr`` and the reference name the public home) and caches it
in the module's namespace. A deprecated name warns on each use and points to its new home.
"""

from __future__ import annotations

import importlib
import inspect
import typing
import warnings
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["public_module"]


def _rehome(value: Any, home: str) -> None:
    """Name ``home`` as the module of a class or function defined in a private module.

    ``typing.get_type_hints`` resolves a class's string annotations (``from __future__ import
    annotations``) in the namespace of the module its ``__module__`` names: a class's own
    annotations are resolved first, in its defining module, so they keep resolving. A class
    whose annotations cannot be resolved even there keeps its private module."""
    defined = isinstance(value, type) or (callable(value) and hasattr(value, "__code__"))
    if not defined or not getattr(value, "__module__", "").startswith("aiostream_synth._"):
        return
    if isinstance(value, type):
        own = inspect.get_annotations(value)  # its own, as written
        if own:
            try:
                hints = typing.get_type_hints(value, include_extras=True)
            except NameError:
                return
            value.__annotations__ = {name: hints.get(name, hint) for name, hint in own.items()}
    value.__module__ = home


def public_module(
    name: str,
    namespace: dict[str, Any],
    exports: Mapping[str, str],
    deprecated: Mapping[str, str] | None = None,
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for the public module ``name`` (its ``globals()`` is
    ``namespace``). ``exports``: public name -> the module to import it from (a private one:
    the object is re-homed here; or another public one, which re-homes it itself).
    ``deprecated``: old name -> ``"module.new_name"``, which it resolves to with a warning."""
    old_names = dict(deprecated or {})

    def __getattr__(attribute: str) -> Any:
        if attribute in exports:
            source = exports[attribute]
            value = getattr(importlib.import_module(source), attribute)
            if source.startswith("aiostream_synth._"):
                _rehome(value, name)
            namespace[attribute] = value  # the next lookup is an ordinary one
            return value
        if attribute in old_names:
            module, _, new = old_names[attribute].rpartition(".")
            warnings.warn(
                f"{name}.{attribute} is deprecated and will be removed in the next release; "
                f"use {module}.{new}",
                DeprecationWarning,
                stacklevel=2,
            )
            return getattr(importlib.import_module(module), new)
        raise AttributeError(f"module {name!r} has no attribute {attribute!r}")

    def __dir__() -> list[str]:
        return sorted({*namespace, *exports})

    return __getattr__, __dir__
