"""Strict, validatable mirrors of the openai SDK's request ``TypedDict`` types (decision P3).

The SDK's params types are written for type checkers, not for validation: lists are
``Iterable[...]`` (which pydantic validates lazily, as a one-shot generator), some string lists
are a ``SequenceNotStr`` protocol, and nothing forbids unknown keys. :func:`strict_type` rebuilds
an annotation so that pydantic validates it eagerly and strictly:

* every ``TypedDict`` is copied with the same keys (required-ness kept) and ``extra="forbid"``,
  so an unknown key anywhere is reported as ``extra_forbidden`` at a literal location;
* ``Iterable`` / ``Sequence`` / ``SequenceNotStr`` become ``list``; ``Annotated`` metadata is
  dropped;
* a file-upload type (``IO[bytes]``, a path) becomes ``str``, what a JSON body carries there;
* a pydantic model arm (the anthropic SDK's response blocks, which a request may carry back)
  becomes a TypedDict mirror of its fields, so a JSON object validates to a dict, never a model;
* a union of ``TypedDict`` arms that all declare a literal ``type`` (else ``role``: chat
  messages) becomes a union discriminated on that key, so a bad tool spec, input item or
  message is reported against the arms of its own kind only, not against every arm.

``relaxed=True`` builds the mirrors a proxy validates with (decision P10): a key the SDK marks
``Required`` is optional, because a client that omits it (a function tool without ``strict``,
an assistant replay without ``status``) sent nothing wrong that the upstream cannot default.
Only a literal ``type`` / ``role`` keeps its required-ness: it says which kind of object this is.

The field sets therefore follow whatever openai version is installed.
"""

from __future__ import annotations

import collections.abc
import os
import types
import typing
from collections.abc import Callable
from functools import cache
from typing import Any, Union, get_args, get_origin

import typing_extensions
from pydantic import BaseModel, ConfigDict, Discriminator, Tag

__all__ = ["list_item_type", "strict_type"]

_FORBID = ConfigDict(extra="forbid")
_MISSING_TAG = "<absent>"
_DISCRIMINATOR_KEYS = ("type", "role")
_LIST_ORIGINS: tuple[Any, ...] = (
    collections.abc.Iterable,
    collections.abc.Sequence,
    collections.abc.Iterator,
    collections.abc.Collection,
    list,
)
_REQUIRED_WRAPPERS: tuple[Any, ...] = tuple(
    {typing_extensions.Required, typing_extensions.NotRequired, typing.Required, typing.NotRequired}
)
_REQUIRED: tuple[Any, ...] = tuple({typing_extensions.Required, typing.Required})
_ANNOTATED: tuple[Any, ...] = tuple({typing.Annotated, typing_extensions.Annotated})
_LITERAL: tuple[Any, ...] = tuple({typing.Literal, typing_extensions.Literal})

_cache: dict[tuple[Any, bool], Any] = {}
_building: set[tuple[Any, bool]] = set()
#: Keys whose required-ness survives relaxing when their annotation is a literal.
_KIND_KEYS = frozenset({"type", "role"})


def _is_typeddict(tp: Any) -> bool:
    return isinstance(tp, type) and typing_extensions.is_typeddict(tp)


def _strip_required(tp: Any) -> Any:
    while get_origin(tp) in _REQUIRED_WRAPPERS:
        tp = get_args(tp)[0]
    return tp


def _is_literal(tp: Any) -> bool:
    return get_origin(tp) in _LITERAL


def _strict_typeddict(tp: type, relaxed: bool) -> Any:
    cache_key = (tp, relaxed)
    if cache_key in _cache:
        return _cache[cache_key]
    if cache_key in _building:  # a recursive type: accept any object at the recursion point
        return dict[str, Any]
    _building.add(cache_key)
    try:
        hints = typing_extensions.get_type_hints(tp, include_extras=True)
        total = getattr(tp, "__total__", True)
        fields: dict[str, Any] = {}
        for key, hint in hints.items():
            # Required-ness from the resolved hint: with postponed annotations (the SDK's
            # style) ``__required_keys__`` cannot see ``Required[...]`` written as a string.
            wrapper_origin = get_origin(hint)
            required = (
                wrapper_origin in _REQUIRED if wrapper_origin in _REQUIRED_WRAPPERS else total
            )
            bare = _strip_required(hint)
            if relaxed and not (key in _KIND_KEYS and _is_literal(bare)):
                required = False
            inner = strict_type(bare, relaxed=relaxed)
            wrapper = typing_extensions.Required if required else typing_extensions.NotRequired
            fields[key] = wrapper[inner]
        make_typeddict: Any = typing_extensions.TypedDict
        mirrored: Any = make_typeddict(tp.__name__, fields, total=False)
        mirrored.__pydantic_config__ = _FORBID
        mirrored.__module__ = __name__
        mirrored.__qualname__ = tp.__name__
    finally:
        _building.discard(cache_key)
    _cache[cache_key] = mirrored
    return mirrored


def _strict_model(tp: type[BaseModel], relaxed: bool) -> Any:
    """A pydantic model arm (the anthropic SDK lets a request carry its response blocks back)
    as a TypedDict mirror, so that a JSON object validates to a plain dict, never a model."""
    cache_key = (tp, relaxed)
    if cache_key in _cache:
        return _cache[cache_key]
    if cache_key in _building:
        return dict[str, Any]
    _building.add(cache_key)
    try:
        fields: dict[str, Any] = {}
        for name, info in tp.model_fields.items():
            bare = info.annotation
            required = info.is_required()
            if relaxed and not ((info.alias or name) in _KIND_KEYS and _is_literal(bare)):
                required = False
            wrapper = typing_extensions.Required if required else typing_extensions.NotRequired
            fields[info.alias or name] = wrapper[strict_type(bare, relaxed=relaxed)]
        make_typeddict: Any = typing_extensions.TypedDict
        mirrored: Any = make_typeddict(tp.__name__, fields, total=False)
        mirrored.__pydantic_config__ = _FORBID
        mirrored.__module__ = __name__
        mirrored.__qualname__ = tp.__name__
    finally:
        _building.discard(cache_key)
    _cache[cache_key] = mirrored
    return mirrored


def _literal_tags(td: Any, key: str) -> tuple[list[str], bool] | None:
    """The literal values an (already mirrored) TypedDict accepts for ``key``, and whether
    ``key`` may be omitted; ``None`` when the field is not a string literal."""
    hint = typing_extensions.get_type_hints(td).get(key)
    if hint is None:
        return None
    tags: list[str] = []
    for arm in get_args(hint) if _is_union(hint) else (hint,):
        if get_origin(arm) in _LITERAL and all(isinstance(v, str) for v in get_args(arm)):
            tags.extend(get_args(arm))
        elif arm is type(None):
            continue
        else:
            return None
    return tags, key not in getattr(td, "__required_keys__", ())


def _is_union(tp: Any) -> bool:
    origin: Any = get_origin(tp)
    return origin is Union or origin is types.UnionType


@cache
def _discriminator(key: str) -> Callable[[Any], str | None]:
    def tag_of(value: Any) -> str | None:
        if isinstance(value, dict):
            tag = value.get(key, _MISSING_TAG)
            return tag if isinstance(tag, str) else None
        return None

    tag_of.__name__ = f"{key}_tag"
    tag_of.key = key  # type: ignore[attr-defined]
    return tag_of


def _discriminated(dict_arms: list[Any]) -> Any | None:
    """The arms as a union discriminated on ``type`` (or else ``role``), if they allow it."""
    for key in _DISCRIMINATOR_KEYS:
        groups: dict[str, list[Any]] = {}
        for arm in dict_arms:
            found = _literal_tags(arm, key)
            if found is None:
                break
            tags, optional = found
            for tag in [*tags, *([_MISSING_TAG] if optional else [])]:
                groups.setdefault(tag, []).append(arm)
        else:
            annotated: Any = typing.Annotated
            if _MISSING_TAG not in groups and all(len(group) == 1 for group in groups.values()):
                # One arm per tag and the key always present: pydantic's own discriminator
                # (in Rust, not a Python call per value).
                return annotated[Union[tuple(dict_arms)], Discriminator(key)]  # noqa: UP007
            tagged = [
                typing.Annotated[Union[tuple(group)] if len(group) > 1 else group[0], Tag(tag)]  # noqa: UP007
                for tag, group in groups.items()
            ]
            return annotated[Union[tuple(tagged)], Discriminator(_discriminator(key))]  # noqa: UP007
    return None


def _strict_union(args: tuple[Any, ...], relaxed: bool) -> Any:
    arms = [strict_type(arm, relaxed=relaxed) for arm in args]
    dict_arms = [arm for arm in arms if _is_typeddict(arm)]
    if len(dict_arms) >= 2:
        discriminated = _discriminated(dict_arms)
        if discriminated is not None:
            arms = [*(arm for arm in arms if not _is_typeddict(arm)), discriminated]
    return Union[tuple(arms)] if len(arms) > 1 else arms[0]  # noqa: UP007


def _is_file_input(tp: Any, origin: Any) -> bool:
    """A file-upload type (``IO[bytes]``, a path): in a JSON body such a value is a string."""
    if tp is typing.IO or origin is typing.IO:
        return True
    return isinstance(tp, type) and issubclass(tp, (os.PathLike, typing.IO))


def strict_type(tp: Any, *, relaxed: bool = False) -> Any:
    """Return the strict, eagerly validatable counterpart of an SDK annotation
    (``relaxed``: with no required keys but literal kinds, see the module docstring)."""
    if _is_typeddict(tp):
        return _strict_typeddict(tp, relaxed)
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return _strict_model(tp, relaxed)
    origin = get_origin(tp)
    if _is_file_input(tp, origin):
        return str
    if origin is None:
        return tp
    args = get_args(tp)
    if origin in _ANNOTATED:
        return strict_type(args[0], relaxed=relaxed)
    if origin in (Union, types.UnionType):
        return _strict_union(args, relaxed)
    if origin in _LITERAL:
        return tp
    if origin in _LIST_ORIGINS or getattr(origin, "__name__", "") == "SequenceNotStr":
        return list[strict_type(args[0], relaxed=relaxed)]  # type: ignore[misc]
    if origin in (dict, collections.abc.Mapping, collections.abc.MutableMapping):
        return dict[strict_type(args[0], relaxed=relaxed), strict_type(args[1], relaxed=relaxed)]  # type: ignore[misc]
    if origin is tuple:
        return tuple[tuple(strict_type(arg, relaxed=relaxed) for arg in args)]  # type: ignore[misc]
    return tp


def list_item_type(annotation: Any) -> Any | None:
    """The item type of the (first) ``list[...]`` arm of ``annotation``, if it has one."""
    if get_origin(annotation) in _ANNOTATED:
        return list_item_type(get_args(annotation)[0])
    if get_origin(annotation) is list:
        return get_args(annotation)[0]
    if get_origin(annotation) in (Union, types.UnionType):
        for arm in get_args(annotation):
            found = list_item_type(arm)
            if found is not None:
                return found
    return None
