"""Validating a request body under decision P10: forward what cannot be proven wrong.

The rules, for any params model (ours or a caller's):

* a missing key is never an error below the top level (our models are built from the relaxed
  mirrors of :mod:`._strict_types`), so nothing is ever removed for lacking a key;
* an unknown key is pruned (it is newer than the installed SDK's types) and recorded;
* a tool or input item whose ``type`` the SDK does not know is dropped and recorded
  (:func:`drop_unknown_kinds`; a hosted tool or item type newer than our types);
* anything else — a value of the wrong type, a part type that does not exist — is raised as
  pydantic's :class:`ValidationError`, for the HTTP layer to answer 400 naming its path.

Unknown keys on list members (tools, input items, messages) are pruned *before* pydantic runs:
for each member, the arms of its union that could be it (same ``type`` tag, literal fields such
as ``role`` accepting its values) declare the keys it may have, and any other key goes. Codex
sends a message ``id`` on every history item, which the SDK's input message types do not model,
so this keeps its requests to one validation pass instead of a failed pass and a retry. Keys
nested deeper are pruned by :func:`._pruning.validate_pruning`'s union-aware plan.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any, TypeVar, Union, get_args, get_origin

import typing_extensions
from pydantic import BaseModel, Discriminator, Tag, ValidationError

from aiostream_synth._params.pruning import validate_pruning
from aiostream_synth._params.removals import Removals
from aiostream_synth._params.strict import ARM, KIND_KEYS, MISSING_TAG, NULL_TAG, list_item_type
from aiostream_synth._wire.json import json_copy

__all__ = [
    "drop_unknown_kinds",
    "member_kinds",
    "prune_unknown_member_keys",
    "validate_params",
]

M = TypeVar("M", bound=BaseModel)
_LITERALS: tuple[Any, ...] = tuple({typing.Literal, typing_extensions.Literal})
_ANNOTATED: tuple[Any, ...] = tuple({typing.Annotated, typing_extensions.Annotated})


@dataclass(frozen=True, slots=True)
class _Arm:
    keys: frozenset[str]
    #: key -> the literal values it accepts (``type``, ``role``, ``status``...)
    literals: dict[str, frozenset[Any]]

    def accepts(self, member: dict[str, Any]) -> bool:
        # An arm that does not declare a kind key the member has is another kind (a message
        # with a ``role`` is never an item reference).
        """Whether ``member`` could be of this arm's kind (its kind keys and their literal
        values). Other literals (``status``) are not judged here: a wrong one is the client's
        error to hear about, not a sign that the member is another kind (issue 38, #14)."""
        for key in KIND_KEYS:
            if key in member and key not in self.keys:
                return False
        for key in KIND_KEYS:
            allowed = self.literals.get(key)
            if allowed is not None and key in member:
                value = member[key]
                try:
                    if value not in allowed:
                        return False
                except TypeError:  # an unhashable value: not a literal this arm accepts
                    return False
        return True


@dataclass(frozen=True, slots=True)
class _Union:
    """One list field's member union: the key that tells its kinds apart (``type``, ``role``;
    None when it is not discriminated) and the arms behind each value of it."""

    key: str | None
    groups: dict[Any, tuple[_Arm, ...]]


def _literal_values(tp: Any) -> frozenset[Any] | None:
    """The values a literal (or an optional literal) annotation accepts; None otherwise."""
    values: list[Any] = []
    for arm in get_args(tp) if get_origin(tp) in (Union, types.UnionType) else (tp,):
        if arm is type(None):
            values.append(None)
        elif get_origin(arm) in _LITERALS:
            values.extend(get_args(arm))
        else:
            return None
    return frozenset(values)


def _arm(tp: Any) -> _Arm | None:
    if isinstance(tp, type) and typing_extensions.is_typeddict(tp):
        hints = typing_extensions.get_type_hints(tp)
    elif isinstance(tp, type) and issubclass(tp, BaseModel):
        hints = {(f.alias or name): f.annotation for name, f in tp.model_fields.items()}
    else:
        return None
    literals = {k: v for k, v in ((k, _literal_values(h)) for k, h in hints.items()) if v}
    return _Arm(frozenset(hints), literals)


def _arms_of(tp: Any) -> list[_Arm] | None:
    """The object arms of ``tp`` (a TypedDict, a model, or a union of them); None when any
    arm is something else, so nothing is pruned on a guess."""
    if get_origin(tp) in _ANNOTATED:
        return _arms_of(get_args(tp)[0])
    candidates = get_args(tp) if get_origin(tp) in (Union, types.UnionType) else (tp,)
    arms: list[_Arm] = []
    for candidate in candidates:
        if get_origin(candidate) in _ANNOTATED or get_origin(candidate) in (Union, types.UnionType):
            inner = _arms_of(candidate)
            if inner is None:
                return None
            arms.extend(inner)
            continue
        arm = _arm(candidate)
        if arm is None:
            return None
        arms.append(arm)
    return arms


def _tag(metadata: tuple[Any, ...]) -> Any:
    """The kind value an arm of our discriminated unions stands for (its label without the
    :data:`ARM` prefix); ``None`` when it has none."""
    tag = next((m.tag for m in metadata if isinstance(m, Tag)), None)
    return tag[len(ARM) :] if isinstance(tag, str) and tag.startswith(ARM) else tag


@cache
def _member_union(model: type[BaseModel], field: str) -> _Union | None:
    info = model.model_fields.get(field)
    item = None if info is None else list_item_type(info.annotation)
    if item is None:
        return None
    if get_origin(item) in _ANNOTATED:
        union, *metadata = get_args(item)
        discriminator = next((m for m in metadata if isinstance(m, Discriminator)), None)
        key = None if discriminator is None else discriminator.discriminator
        if isinstance(key, str):  # pydantic's own: one arm per literal value of ``key``
            groups: dict[Any, tuple[_Arm, ...]] = {}
            for member in get_args(union):
                arm = _arm(member)
                if arm is None or key not in arm.literals:
                    return None
                for tag in arm.literals[key]:
                    groups[tag] = (arm,)
            return _Union(key, groups)
        key = getattr(key, "key", None)  # our tag function (_strict_types._discriminator)
        if isinstance(key, str):
            groups = {}
            for tagged in get_args(union):
                arms = _arms_of(tagged)
                tag = _tag(get_args(tagged)[1:]) if get_origin(tagged) in _ANNOTATED else None
                if arms is None or tag is None:
                    return None
                groups[tag] = tuple(arms)
            return _Union(key, groups)
    arms = _arms_of(item)
    if arms is None:
        return None
    return _Union(None, {None: tuple(arms)})


def member_kinds(model: type[BaseModel], field: str) -> frozenset[str] | None:
    """The ``type`` values the members of list field ``field`` may have (None: unknowable)."""
    union = _member_union(model, field)
    if union is None or union.key != "type":
        return None
    return frozenset(
        tag for tag in union.groups if isinstance(tag, str) and tag not in (MISSING_TAG, NULL_TAG)
    )


def drop_unknown_kinds(
    model: type[BaseModel],
    field: str,
    located: list[tuple[Any, tuple[str | int, ...]]],
    removals: Removals,
    what: str,
) -> list[tuple[Any, tuple[str | int, ...]]]:
    """``located`` (members of list field ``field``, each with its path in the client's body)
    without the objects whose string ``type`` the model does not know.

    Each one is recorded at its path ("unknown tool type 'x'"). Anything else, including a
    member that is not an object or whose ``type`` is not a string, stays for validation to
    judge; so does everything when the model's kinds cannot be read.
    """
    kinds = member_kinds(model, field)
    if kinds is None:
        return located
    kept: list[tuple[Any, tuple[str | int, ...]]] = []
    for member, path in located:
        kind = member.get("type") if isinstance(member, dict) else None
        if isinstance(kind, str) and kind not in kinds:
            removals.add(path, f"unknown {what} type {kind!r}")
            continue
        kept.append((member, path))
    return kept


def prune_unknown_member_keys(
    model: type[BaseModel],
    field: str,
    members: list[Any],
    removals: Removals,
    *,
    benign: Callable[[dict[str, Any], str], bool] | None = None,
) -> list[Any]:
    """``members`` with every top-level key that no candidate arm declares removed.

    Returns the same list when nothing changes; a changed member is a copy. A member with no
    candidate arm (unknown tag, literal values no arm accepts) is left for validation to judge.
    """
    union = _member_union(model, field)
    if union is None:
        return members
    key, groups = union.key, union.groups
    out = members
    for index, member in enumerate(members):
        if not isinstance(member, dict):
            continue
        tag = None
        if key is not None:
            tag = member.get(key, MISSING_TAG)
            if not isinstance(tag, str):
                continue
        arms = groups.get(tag)
        if not arms:
            continue  # a kind the model does not know: validation (or the sanitizer) judges
        keys = member.keys()
        if len(arms) == 1:
            if keys <= arms[0].keys:
                continue  # the usual case: nothing unknown
            accepting: Sequence[_Arm] = arms if arms[0].accepts(member) else ()
        else:
            if any(keys <= arm.keys and arm.accepts(member) for arm in arms):
                continue
            accepting = [arm for arm in arms if arm.accepts(member)]
        if not accepting:
            continue  # no arm could be it: validation will say why
        allowed = frozenset().union(*(arm.keys for arm in accepting))
        unknown = [name for name in member if name not in allowed]
        if out is members:
            out = list(members)
        out[index] = {name: value for name, value in member.items() if name in allowed}
        for name in unknown:
            quiet = benign is not None and benign(member, name)
            removals.add_cleaned((field, index, name), "unknown key", benign=quiet)
    return out


def validate_params(
    model: type[M],
    body: dict[str, Any],
    removals: Removals,
    *,
    member_fields: tuple[str, ...] = (),
    benign: Callable[[dict[str, Any], str], bool] | None = None,
) -> M:
    """Validate ``body`` against ``model`` under the rules of the module docstring.

    ``member_fields`` names the list fields whose members are pre-pruned. Pruned keys are
    recorded in ``removals``; any other error is raised as pydantic reported it. The input is
    never mutated.
    """
    candidate = body
    for name in member_fields:
        members = candidate.get(name)
        if isinstance(members, list):
            pruned = prune_unknown_member_keys(model, name, members, removals, benign=benign)
            if pruned is not members:
                if candidate is body:
                    candidate = dict(body)
                candidate[name] = pruned
    try:
        return model.model_validate(candidate)
    except ValidationError:
        pass
    # Rare: unknown keys nested deeper (a content part, a tool's format). A private deep copy,
    # pruned in place with the union-aware plan.
    return validate_pruning(model.model_validate, json_copy(candidate), removals)
