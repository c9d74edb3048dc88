"""Hypothesis strategies that draw JSON values from the installed SDKs' own types.

Requests are drawn from the params ``TypedDict`` s (``ChatCompletionMessageParam``, ``ToolParam``,
``BetaMessageParam``...), results from the response models (``ResponseOutputItem``,
``BetaMessage``): every key the SDK declares may appear, with a value of its declared type, so a
field the SDK adds next release is drawn without anyone listing it. Objects drawn from a typed
shape are :class:`Typed` dicts (a ``dict`` subclass that serializes as any dict), so a test can
tell them from free-form maps (``metadata``, a JSON Schema) when it injects a key or a wrong
value.
"""

from __future__ import annotations

import collections.abc
import types
import typing
from typing import Any, Union, get_args, get_origin

import typing_extensions
from hypothesis import strategies as st
from pydantic import BaseModel

__all__ = ["Typed", "typed_paths", "value_of"]

Path = tuple[str | int, ...]


class Typed(dict[str, Any]):
    """An object drawn from a typed shape; ``strings`` names its keys declared as plain
    ``str`` (where an integer is a wrong value under every arm that declares the key)."""

    strings: frozenset[str] = frozenset()


_LITERALS = (typing.Literal, typing_extensions.Literal)
_ANNOTATED = (typing.Annotated, typing_extensions.Annotated)
_REQUIRED = (typing_extensions.Required, typing_extensions.NotRequired)
_LISTS = (
    list,
    collections.abc.Iterable,
    collections.abc.Sequence,
    collections.abc.Iterator,
    collections.abc.Collection,
)
_JSON_LEAF = st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.text(max_size=4))
_JSON = st.recursive(
    _JSON_LEAF,
    lambda inner: (
        st.lists(inner, max_size=2) | st.dictionaries(st.text(max_size=3), inner, max_size=2)
    ),
    max_leaves=4,
)
_TEXT = st.text(alphabet="abcxyz ", min_size=1, max_size=6)


def _strip(tp: Any) -> Any:
    while get_origin(tp) in _REQUIRED or get_origin(tp) in _ANNOTATED:
        tp = get_args(tp)[0]
    return tp


def _fields(tp: Any) -> tuple[dict[str, Any], frozenset[str]]:
    """(key -> annotation, required keys) of a TypedDict or a pydantic model."""
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        hints = {(f.alias or n): f.annotation for n, f in tp.model_fields.items()}
        required = frozenset((f.alias or n) for n, f in tp.model_fields.items() if f.is_required())
        return hints, required
    hints = typing_extensions.get_type_hints(tp, include_extras=True)
    required = frozenset(
        key
        for key, hint in hints.items()
        if (get_origin(hint) is typing_extensions.Required)
        or (
            get_origin(hint) is not typing_extensions.NotRequired and getattr(tp, "__total__", True)
        )
    )
    return {key: _strip(hint) for key, hint in hints.items()}, required


def _is_object_type(tp: Any) -> bool:
    return (isinstance(tp, type) and issubclass(tp, BaseModel)) or (
        isinstance(tp, type) and typing_extensions.is_typeddict(tp)
    )


def value_of(tp: Any, depth: int = 0) -> st.SearchStrategy[Any]:
    """Values of annotation ``tp`` (optional keys drawn at random; none past ``depth`` 4)."""
    tp = _strip(tp)
    origin = get_origin(tp)
    if tp is type(None):
        return st.none()
    if tp is str:
        return _TEXT
    if tp is bool:
        return st.booleans()
    if tp is int:
        return st.integers(0, 50)
    if tp is float:
        return st.floats(0, 2, allow_nan=False).map(lambda x: round(x, 2))
    if tp in (object, Any):
        return _JSON
    if origin in _LITERALS:
        return st.sampled_from(get_args(tp))
    if origin in (Union, types.UnionType):
        return st.one_of([value_of(arm, depth) for arm in get_args(tp)])
    if origin in _LISTS or getattr(origin, "__name__", "") == "SequenceNotStr":
        if depth > 4:
            return st.just([])
        return st.lists(value_of(get_args(tp)[0], depth + 1), max_size=2)
    if origin in (dict, collections.abc.Mapping) or tp is dict:
        inner = get_args(tp)[1] if get_args(tp) else object
        return st.dictionaries(_TEXT, value_of(inner, depth + 1), max_size=2)
    if _is_object_type(tp):
        return _object(tp, depth)
    if isinstance(tp, type) and issubclass(tp, str):
        return _TEXT
    return st.nothing()


def _object(tp: Any, depth: int) -> st.SearchStrategy[Any]:
    hints, required = _fields(tp)
    strings = frozenset(key for key, hint in hints.items() if hint is str)

    @st.composite
    def build(draw: st.DrawFn) -> Typed:
        out = Typed()
        out.strings = strings
        for key, hint in hints.items():
            if key in required or (depth <= 4 and draw(st.booleans())):
                out[key] = draw(value_of(hint, depth + 1))
        return out

    return build()


def typed_paths(value: Any, path: Path = ()) -> list[tuple[Path, Typed]]:
    """Every :class:`Typed` object in ``value``, with its path."""
    found: list[tuple[Path, Typed]] = []
    if isinstance(value, Typed):
        found.append((path, value))
    if isinstance(value, dict):
        for key, child in value.items():
            found.extend(typed_paths(child, (*path, key)))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            found.extend(typed_paths(child, (*path, index)))
    return found
