"""Strict, validatable mirrors of the openai SDK's request ``TypedDict`` types (decision P3).

The SDK's params types are written for type checkers, not for validation: lists are
``Iterable[...]`` (which pydantic validates lazily, as a one-shot generator), some string lists
are a ``SequenceNotStr`` protocol, and nothing forbids unknown keys. :func:`strict_type` rebuilds
an annotation so that pydantic validates it eagerly and strictly:

* every ``TypedDict`` is copied with the same keys (required-ness kept), ``extra="forbid"``
  and ``strict=True``, so an unknown key anywhere is reported as ``extra_forbidden`` at a
  literal location, and a value of the wrong JSON type is an error, never coerced (``"12"``
  is no integer, ``0`` no boolean; an integral ``12.0`` is the integer 12);
* ``Iterable`` / ``Sequence`` / ``SequenceNotStr`` become ``list``; ``Annotated`` metadata is
  dropped;
* a file-upload type (``IO[bytes]``, a path) becomes ``str``, what a JSON body carries there;
* a pydantic model arm (the anthropic SDK's response blocks, which a request may carry back)
  becomes a TypedDict mirror of its fields, so a JSON object validates to a dict, never a model;
* a union of ``TypedDict`` arms that all declare a literal ``type`` (else ``role``: chat
  messages) becomes a union discriminated on that key, so a bad tool spec, input item or
  message is reported against the arms of its own kind only, not against every arm; nested
  unions are flattened first (the anthropic SDK's request blocks and response blocks are
  one union), and a kind key typed ``Optional`` takes ``null`` as a tag of its own;
* every arm of every union is labelled ``⟪<name>`` (:data:`ARM`): an error location's
  labels then never read like keys (a ``text`` part has a key ``text``), so pruning and the
  400's ``param`` can tell the body's path from the union's arms.

``relaxed=True`` builds the mirrors a proxy validates with (decision P10): a key the SDK marks
``Required`` is optional, because a client that omits it (a function tool without ``strict``,
an assistant replay without ``status``) sent nothing wrong that the upstream cannot default.
Only a literal ``type`` / ``role`` keeps its required-ness: it says which kind of object this is.

``open_values=True`` builds the mirrors of an SDK older than the one our rules track
(:mod:`.sdks`): an enumeration of strings (``detail: "low" | "high" | "auto"``) accepts any
string, because an old SDK's list may lack a value real clients send today (``"original"``),
which the proxy forwards rather than refuse. A literal ``type`` / ``role`` stays closed: it
chooses the union arm, and an unknown kind is judged by the rules for unknown kinds.

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
from pydantic import BaseModel, BeforeValidator, ConfigDict, Discriminator, Field, Tag

__all__ = [
    "ARM",
    "KIND_KEYS",
    "MISSING_TAG",
    "NULL_TAG",
    "is_arm_label",
    "list_item_type",
    "strict_type",
]

#: Mirrors forbid unknown keys and validate strictly: a string is never read as a number, nor
#: ``0`` as ``false`` (issue 38: what a client sent wrong is a 400, not a guess).
_FORBID = ConfigDict(extra="forbid", strict=True)
#: The prefix of every union arm label we give (a character no API key starts with).
ARM = "\u27ea"
#: The tags of a member without the kind key, and of one whose kind key is null.
MISSING_TAG = "<absent>"
NULL_TAG = "<null>"
_SPECIAL_TAGS = frozenset({MISSING_TAG, NULL_TAG})
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

_cache: dict[tuple[Any, bool, bool], Any] = {}
_building: set[tuple[Any, bool, bool]] = set()
#: Keys that say which kind of object this is (their required-ness survives relaxing when
#: their annotation is a literal; a wrong one means another arm of a union).
KIND_KEYS = frozenset({"type", "role"})


def _is_typeddict(tp: Any) -> bool:
    return isinstance(tp, type) and typing_extensions.is_typeddict(tp)


def _strip_required(tp: Any) -> Any:
    while get_origin(tp) in _REQUIRED_WRAPPERS:
        tp = get_args(tp)[0]
    return tp


def _is_literal(tp: Any) -> bool:
    return get_origin(tp) in _LITERAL


def _is_kind_literal(tp: Any) -> bool:
    """A kind key's annotation: a literal, or an optional one (``type: "custom" | None``)."""
    if _is_union(tp):
        arms = [arm for arm in get_args(tp) if arm is not type(None)]
        return bool(arms) and all(_is_literal(arm) for arm in arms)
    return _is_literal(tp)


def _opened(tp: Any) -> Any:
    """An enumeration of strings as ``str`` (``open_values``); any other literal as it is."""
    values = get_args(tp)
    return str if values and all(isinstance(value, str) for value in values) else tp


def _strict_typeddict(tp: type, relaxed: bool, open_values: bool) -> Any:
    cache_key = (tp, relaxed, open_values)
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
            if relaxed and not (key in KIND_KEYS and _is_literal(bare)):
                required = False
            kind = key in KIND_KEYS and _is_kind_literal(bare)
            inner = strict_type(bare, relaxed=relaxed, open_values=open_values and not kind)
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


def _strict_model(tp: type[BaseModel], relaxed: bool, open_values: bool) -> Any:
    """A pydantic model arm (the anthropic SDK lets a request carry its response blocks back)
    as a TypedDict mirror, so that a JSON object validates to a plain dict, never a model."""
    cache_key = (tp, relaxed, open_values)
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
            key = info.alias or name
            if relaxed and not (key in KIND_KEYS and _is_literal(bare)):
                required = False
            kind = key in KIND_KEYS and _is_kind_literal(bare)
            inner = strict_type(bare, relaxed=relaxed, open_values=open_values and not kind)
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


def _literal_tags(td: Any, key: str) -> tuple[list[str], bool, bool] | None:
    """The literal values an (already mirrored) TypedDict accepts for ``key``, whether ``key``
    may be omitted and whether it may be null; ``None`` when the field is not a string
    literal."""
    hint = typing_extensions.get_type_hints(td).get(key)
    if hint is None:
        return None
    tags: list[str] = []
    nullable = False
    for arm in get_args(hint) if _is_union(hint) else (hint,):
        if get_origin(arm) in _LITERAL and all(isinstance(v, str) for v in get_args(arm)):
            tags.extend(get_args(arm))
        elif arm is type(None):
            nullable = True
        else:
            return None
    return tags, key not in getattr(td, "__required_keys__", ()), nullable


def _is_union(tp: Any) -> bool:
    origin: Any = get_origin(tp)
    return origin is Union or origin is types.UnionType


def is_arm_label(part: object) -> bool:
    """Whether a validation-error location part is a union arm's label, not a key or index."""
    return isinstance(part, str) and part.startswith(ARM)


def _arm_name(arm: Any) -> str:
    if _is_typeddict(arm) or (isinstance(arm, type) and get_origin(arm) is None):
        return str(arm.__name__)
    origin = get_origin(arm)
    if origin in _LITERAL:
        return "literal"
    if origin in _ANNOTATED:
        return "tagged"
    return str(getattr(origin, "__name__", None) or repr(arm))


def _labelled(arms: list[Any]) -> Any:
    """``arms`` as a plain union whose arms carry :data:`ARM`-prefixed labels (``None`` left
    as pydantic's nullable), so that no label in an error location reads like a key."""
    nullable = type(None) in arms
    rest = [arm for arm in arms if arm is not type(None)]
    if not rest:
        return type(None)
    if len(rest) == 1:
        union: Any = rest[0]
    else:
        seen: dict[str, int] = {}
        tagged = []
        for arm in rest:
            name = _arm_name(arm)
            seen[name] = seen.get(name, 0) + 1
            label = name if seen[name] == 1 else f"{name}{seen[name]}"
            tagged.append(typing.Annotated[arm, Tag(ARM + label)])
        union = Union[tuple(tagged)]  # noqa: UP007
    return Union[union, None] if nullable else union  # noqa: UP007


@cache
def _discriminator(key: str) -> Callable[[Any], str | None]:
    def tag_of(value: Any) -> str | None:
        if isinstance(value, dict):
            tag = value.get(key, MISSING_TAG)
            if tag is None:
                return ARM + NULL_TAG
            return ARM + tag if isinstance(tag, str) else None
        return None

    tag_of.__name__ = f"{key}_tag"
    tag_of.key = key  # type: ignore[attr-defined]
    return tag_of


def _discriminated(dict_arms: list[Any]) -> Any | None:
    """The arms as a union discriminated on ``type`` (or else ``role``), if they allow it.

    Where a tag is also a key of its arm (a ``text`` part has a key ``text``), where one tag
    has several arms, or where the key may be absent or null, the discriminator is our tag
    function, whose tags are :data:`ARM`-prefixed: pydantic's own puts the bare tag in an
    error's location (``content.0.text.text``), where it would read like the key. Elsewhere
    (chat messages by ``role``) pydantic's own is kept: it runs in Rust."""
    for key in _DISCRIMINATOR_KEYS:
        groups: dict[str, list[Any]] = {}
        for arm in dict_arms:
            found = _literal_tags(arm, key)
            if found is None:
                break
            tags, optional, nullable = found
            extra = [*([MISSING_TAG] if optional else []), *([NULL_TAG] if nullable else [])]
            for tag in [*tags, *extra]:
                groups.setdefault(tag, []).append(arm)
        else:
            if _no_label_clash(groups):
                # One arm per tag, always present, no tag that is also a key of its arm:
                # pydantic's own discriminator (in Rust, not a Python call per value) puts the
                # bare tag in an error's location, where it cannot be read as a key.
                annotated_: Any = typing.Annotated
                return annotated_[Union[tuple(dict_arms)], Discriminator(key)]  # noqa: UP007
            tagged = [
                typing.Annotated[_in_order(_labelled(group)), Tag(ARM + tag)]
                for tag, group in groups.items()
            ]
            expected = ", ".join(repr(tag) for tag in groups if tag not in _SPECIAL_TAGS)
            discriminator = Discriminator(
                _discriminator(key),
                custom_error_type="invalid_kind",
                custom_error_message=f"Input should be an object whose '{key}' is one of {expected}",
                custom_error_context=_Context(discriminator=key),
            )
            annotated: Any = typing.Annotated
            return annotated[Union[tuple(tagged)], discriminator]  # noqa: UP007
    return None


def _no_label_clash(groups: dict[str, list[Any]]) -> bool:
    if any(tag in _SPECIAL_TAGS or len(group) != 1 for tag, group in groups.items()):
        return False
    return all(
        tag not in typing_extensions.get_type_hints(group[0]) for tag, group in groups.items()
    )


def _in_order(union: Any) -> Any:
    """The arms of one kind, tried in the SDK's order with the first that fits taken (the
    request arm before the mirrored response block of the same ``type``): pydantic's smart mode
    would validate every arm of every text block to pick the best."""
    if not _is_union(union):
        return union
    return typing.Annotated[union, Field(union_mode="left_to_right")]


class _Context(dict[str, int | str | float]):
    """An error context that can sit in ``Annotated`` metadata (which must be hashable)."""

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(tuple(sorted(self.items())))


def _union_leaves(args: tuple[Any, ...]) -> list[Any]:
    """The arms of a union, nested unions (and the SDK's ``Annotated`` discriminated ones)
    flattened, so that one object is judged against all the arms of its kind at once."""
    leaves: list[Any] = []
    for arm in args:
        origin = get_origin(arm)
        if origin in _ANNOTATED and _is_union(get_args(arm)[0]):
            leaves.extend(_union_leaves(get_args(get_args(arm)[0])))
        elif _is_union(arm):
            leaves.extend(_union_leaves(get_args(arm)))
        elif arm not in leaves:
            leaves.append(arm)
    return leaves


def _strict_union(args: tuple[Any, ...], relaxed: bool, open_values: bool) -> Any:
    arms: list[Any] = []
    for arm in _union_leaves(args):
        strict = strict_type(arm, relaxed=relaxed, open_values=open_values)
        if strict not in arms:
            arms.append(strict)
    dict_arms = [arm for arm in arms if _is_typeddict(arm)]
    if len(dict_arms) >= 2:
        discriminated = _discriminated(dict_arms)
        if discriminated is not None:
            arms = [*(arm for arm in arms if not _is_typeddict(arm)), discriminated]
    return _labelled(arms)


def _integral(value: Any) -> Any:
    """A JSON number written with a fraction of zero (``12.0``) where an integer is due: the
    integer it is (strict validation refuses a float; every other type still fails)."""
    if type(value) is float and value.is_integer():
        return int(value)
    return value


_INT: Any = typing.Annotated[int, BeforeValidator(_integral)]


def _is_file_input(tp: Any, origin: Any) -> bool:
    """A file-upload type (``IO[bytes]``, a path): in a JSON body such a value is a string."""
    if tp is typing.IO or origin is typing.IO:
        return True
    return isinstance(tp, type) and issubclass(tp, (os.PathLike, typing.IO))


def strict_type(tp: Any, *, relaxed: bool = False, open_values: bool = False) -> Any:
    """Return the strict, eagerly validatable counterpart of an SDK annotation
    (``relaxed``: with no required keys but literal kinds; ``open_values``: with enumerations
    of strings open to any string but the kind keys'; see the module docstring)."""
    if _is_typeddict(tp):
        return _strict_typeddict(tp, relaxed, open_values)
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return _strict_model(tp, relaxed, open_values)
    origin = get_origin(tp)
    if _is_file_input(tp, origin):
        return str
    if origin is None:
        return _INT if tp is int else tp
    args = get_args(tp)

    def inner(arg: Any) -> Any:
        return strict_type(arg, relaxed=relaxed, open_values=open_values)

    if origin in _ANNOTATED:
        return inner(args[0])
    if origin in (Union, types.UnionType):
        return _strict_union(args, relaxed, open_values)
    if origin in _LITERAL:
        return _opened(tp) if open_values else tp
    if origin in _LIST_ORIGINS or getattr(origin, "__name__", "") == "SequenceNotStr":
        return list[inner(args[0])]  # type: ignore[misc]
    if origin in (dict, collections.abc.Mapping, collections.abc.MutableMapping):
        return dict[inner(args[0]), inner(args[1])]  # type: ignore[misc]
    if origin is tuple:
        return tuple[tuple(inner(arg) for arg in args)]  # type: ignore[misc]
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
