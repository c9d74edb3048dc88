"""Attribute access to validated params, typed by the SDK's own params types.

Our params models validate against TypedDict mirrors, so a validated body is plain JSON (what a
backend is sent, with nothing added or lost). Server code written against typed item models
reads ``params.input[0].type`` or ``.content``; :class:`ParamsObject` gives that: a ``dict``
(so it serializes and compares as the JSON it is) whose attributes are its fields.

* A present field is returned, nested objects and lists viewed the same way.
* A field the object's type declares but the client omitted returns its default: the literal
  when the type allows exactly one (``type`` of a message written without it is
  ``"message"``), else ``None``.
* Any other name raises :class:`AttributeError`, as a model would.

The object's type is found like its union arm: the SDK types whose literal fields (``type``,
``role``...) accept its values and that declare all its keys. ``dict`` methods keep their
names (``item.get``); read a field named like one with ``item["items"]``.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Iterator
from functools import cache
from typing import Any, Union, get_args, get_origin

import typing_extensions
from pydantic import BaseModel

__all__ = ["ParamsList", "ParamsObject", "attach_views", "view"]

_ANNOTATED: tuple[Any, ...] = tuple({typing.Annotated, typing_extensions.Annotated})
_LITERALS: tuple[Any, ...] = tuple({typing.Literal, typing_extensions.Literal})
_UNIONS: tuple[Any, ...] = (Union, types.UnionType)


def _is_typeddict(tp: Any) -> bool:
    return isinstance(tp, type) and typing_extensions.is_typeddict(tp)


@cache
def _hints(td: Any) -> dict[str, Any]:
    return typing_extensions.get_type_hints(td)


#: id(annotation) -> (annotation, its arms); keyed by identity because hashing a typing
#: object walks all of it. The annotation is kept so its id is never reused.
_FLAT: dict[int, tuple[Any, tuple[Any, ...]]] = {}


def _flatten(tp: Any) -> tuple[Any, ...]:
    """The arms of ``tp`` with ``Annotated`` and nested unions unwrapped."""
    found = _FLAT.get(id(tp))
    if found is not None and found[0] is tp:
        return found[1]
    if get_origin(tp) in _ANNOTATED:
        arms = _flatten(get_args(tp)[0])
    elif get_origin(tp) in _UNIONS:
        arms = tuple(arm for inner in get_args(tp) for arm in _flatten(inner))
    else:
        arms = (tp,)
    _FLAT[id(tp)] = (tp, arms)
    return arms


def _literal(tp: Any) -> tuple[Any, ...] | None:
    values: list[Any] = []
    for arm in _flatten(tp):
        if get_origin(arm) in _LITERALS:
            values.extend(get_args(arm))
        elif arm is not type(None):
            return None
    return tuple(values)


def _fits(td: Any, value: dict[str, Any]) -> bool:
    hints = _hints(td)
    for key, field in value.items():
        if key not in hints:
            return False
        allowed = _literal(hints[key])
        if allowed is not None and field not in allowed:
            return False
    return True


def _objects(tp: Any, value: dict[str, Any]) -> tuple[Any, ...]:
    arms = [arm for arm in _flatten(tp) if _is_typeddict(arm)]
    fitting = tuple(arm for arm in arms if _fits(arm, value))
    return fitting or tuple(arms)


def _element(tp: Any) -> Any:
    for arm in _flatten(tp):
        if get_origin(arm) is list:
            return get_args(arm)[0]
    return Any


def view(value: Any, tp: Any) -> Any:
    """``value`` viewed as the annotation ``tp`` says: objects as :class:`ParamsObject`,
    lists as :class:`ParamsList`, anything else as it is. Nothing is resolved or copied
    beyond the outer container until a field is read."""
    if isinstance(value, dict):
        return value if isinstance(value, ParamsObject) else ParamsObject(value, tp)
    if isinstance(value, list):
        return value if isinstance(value, ParamsList) else ParamsList(value, _element(tp))
    return value


class ParamsList(list[Any]):
    """A JSON array whose objects are viewed as :class:`ParamsObject` when read.

    An element is converted on first access and stored back, so it keeps its identity and a
    change made through it is what the backend is sent.
    """

    __slots__ = ("_element_type",)

    def __init__(self, data: list[Any], element: Any = Any) -> None:
        super().__init__(data)
        self._element_type = element

    def _at(self, index: int) -> Any:
        item = list.__getitem__(self, index)
        if type(item) is dict or type(item) is list:
            item = view(item, self._element_type)
            list.__setitem__(self, index, item)
        return item

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [self._at(i) for i in range(len(self))[index]]
        return self._at(index)

    def __iter__(self) -> Iterator[Any]:
        for index in range(len(self)):
            yield self._at(index)


class ParamsObject(dict[str, Any]):
    """A JSON object whose fields are also its attributes (see the module docstring)."""

    __slots__ = ("_annotation", "_resolved")

    def __init__(self, data: dict[str, Any], annotation: Any = Any) -> None:
        super().__init__(data)
        self._annotation = annotation
        self._resolved: tuple[Any, ...] | None = None

    @property
    def _types(self) -> tuple[Any, ...]:
        if self._resolved is None:
            self._resolved = _objects(self._annotation, self)
        return self._resolved

    def _declared(self, name: str) -> list[Any]:
        return [_hints(td)[name] for td in self._types if name in _hints(td)]

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        try:
            value = self[name]
        except KeyError:
            declared = self._declared(name)
            if not declared:
                raise AttributeError(
                    f"{name!r}: not a field of this object ({', '.join(sorted(self)) or 'empty'})"
                ) from None
            literals = {_literal(tp) for tp in declared}
            only = next(iter(literals))
            return only[0] if len(literals) == 1 and only is not None and len(only) == 1 else None
        if type(value) is dict or type(value) is list:
            declared = self._declared(name)
            value = view(value, Union[tuple(declared)] if declared else Any)  # noqa: UP007
            self[name] = value  # stored back: one view per field, changes reach the backend
        return value

    def __dir__(self) -> list[str]:
        names = set(self)
        for td in self._types:
            names.update(_hints(td))
        return sorted(names | set(super().__dir__()))


def attach_views(params: BaseModel) -> BaseModel:
    """Give every object-valued field of validated ``params`` attribute access, in place.

    The values stay JSON (``dict`` / ``list`` subclasses holding the same items), so what a
    backend is sent is unchanged. Returns ``params``.
    """
    fields = type(params).model_fields
    for name in params.model_fields_set:
        value = params.__dict__.get(name)
        if isinstance(value, (dict, list)):
            params.__dict__[name] = view(value, fields[name].annotation)
    return params
