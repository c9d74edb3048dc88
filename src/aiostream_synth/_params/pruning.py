"""Validate-with-pruning: drop fields newer than our params types, keep every real error.

pydantic reports an unknown key as ``extra_forbidden`` at its location. Inside a union the
location also carries the *arm label* (``tools.12.web_search.WebSearchToolParam.x``), which is
not a key of the body, and every arm of the union reports its own errors. :func:`plan_pruning`
therefore walks the body and the error locations together:

* a part that is one of our arm labels (:data:`._strict.ARM`-prefixed, never a key) opens a
  union, even where the body has a key of the same name (a ``text`` part's ``text``);
* a location part that exists in the body (a dict key, an in-range list index) is followed;
* any other part is an arm label (a caller model's, or the bare tag of pydantic's own
  discriminator): the errors under one union are grouped by arm. An arm that rejects the
  object's kind (a type mismatch at the object itself, or a wrong ``type`` / ``role``) is not
  a candidate. A key may be pruned only when no candidate arm declares it, and
  of the arms whose errors are all such keys, the one with the fewest is chosen; if no arm can
  be fixed that way, nothing under that union is pruned and the error stands.

A key is therefore only ever removed when it is unknown to every arm the object could be: a
function tool's ``name`` is never "pruned" because the web-search arm does not know it, and a
message is never emptied into an item reference because every key of a reference is optional.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from pydantic import ValidationError

from aiostream_synth._params.removals import Removals
from aiostream_synth._params.strict import KIND_KEYS, is_arm_label

__all__ = ["delete_path", "dotted", "plan_from_errors", "plan_pruning", "validate_pruning"]

T = TypeVar("T")
Loc = tuple[str | int, ...]


def dotted(path: Sequence[str | int]) -> str:
    return ".".join(str(part) for part in path)


def _is_step(node: Any, part: str | int) -> bool:
    if isinstance(node, dict):
        return isinstance(part, str) and part in node
    if isinstance(node, list):
        return isinstance(part, int) and not isinstance(part, bool) and 0 <= part < len(node)
    return False


def _rejects_kind(errors: list[tuple[Loc, str]]) -> bool:
    """Whether an arm's errors say the object is not of its kind at all: a type mismatch at the
    object itself, or a ``type`` / ``role`` it does not accept or does not even declare."""
    return any(not loc or (len(loc) == 1 and loc[0] in KIND_KEYS) for loc, _ in errors)


def _leaf_arms(
    node: Any, arms: dict[str | int, list[tuple[Loc, str]]]
) -> list[list[tuple[Loc, str]]]:
    """The errors of each innermost arm: an arm that is itself a union (a discriminated one, or
    the arms of one tag) is opened, so that its arms' keys are judged one by one. Its errors
    all start with a label: ours, or the bare tag pydantic's own discriminator writes (never a
    key of the arm it names, see :mod:`._strict`)."""
    leaves: list[list[tuple[Loc, str]]] = []
    for arm_errors in arms.values():
        if arm_errors and all(
            loc and (is_arm_label(loc[0]) or not _is_step(node, loc[0])) for loc, _ in arm_errors
        ):
            nested: dict[str | int, list[tuple[Loc, str]]] = {}
            for loc, kind in arm_errors:
                nested.setdefault(loc[0], []).append((loc[1:], kind))
            leaves.extend(_leaf_arms(node, nested))
        else:
            leaves.append(arm_errors)
    return leaves


def _plan(node: Any, errors: list[tuple[Loc, str]]) -> tuple[list[Loc], bool]:
    deletions: list[Loc] = []
    fixable = True
    children: dict[str | int, list[tuple[Loc, str]]] = {}
    arms: dict[str | int, list[tuple[Loc, str]]] = {}
    for loc, kind in errors:
        if not loc:
            fixable = False
        elif is_arm_label(loc[0]):
            arms.setdefault(loc[0], []).append((loc[1:], kind))
        elif _is_step(node, loc[0]):
            if len(loc) == 1:
                if kind == "extra_forbidden" and isinstance(node, dict):
                    deletions.append(loc)
                else:
                    fixable = False
            else:
                children.setdefault(loc[0], []).append((loc[1:], kind))
        else:  # a caller model's arm label (or a missing key: an arm that cannot be fixed)
            arms.setdefault(loc[0], []).append((loc[1:], kind))
    for key, sub_errors in children.items():
        sub_deletions, sub_fixable = _plan(node[key], sub_errors)
        deletions.extend((key, *path) for path in sub_deletions)
        fixable = fixable and sub_fixable
    if arms:
        best = _best_arm(node, arms)
        if best is None:
            fixable = False
        else:
            deletions.extend(best)
    return deletions, fixable


def _best_arm(node: Any, arms: dict[str | int, list[tuple[Loc, str]]]) -> list[Loc] | None:
    """The fewest deletions that make one arm valid, pruning only keys no candidate arm knows."""
    known: set[Any] = set()
    if isinstance(node, dict):
        for arm_errors in _leaf_arms(node, arms):
            if not _rejects_kind(arm_errors):
                extra = {
                    loc[0]
                    for loc, kind in arm_errors
                    if len(loc) == 1 and kind == "extra_forbidden"
                }
                known.update(key for key in node if key not in extra)
    best: list[Loc] | None = None
    for arm_errors in arms.values():
        arm_deletions, arm_fixable = _plan(node, arm_errors)
        if not arm_fixable or any(len(path) == 1 and path[0] in known for path in arm_deletions):
            continue
        if best is None or len(arm_deletions) < len(best):
            best = arm_deletions
    return best


def plan_pruning(body: Any, error: ValidationError) -> list[Loc]:
    """Literal paths of unknown keys whose removal fixes (part of) ``error``; may be empty."""
    return plan_from_errors(
        body, [(tuple(e["loc"]), e["type"]) for e in error.errors(include_url=False)]
    )


def plan_from_errors(body: Any, errors: list[tuple[Loc, str]]) -> list[Loc]:
    """:func:`plan_pruning` for ``(location, error type)`` pairs already extracted."""
    deletions, _ = _plan(body, errors)
    return sorted(set(deletions), key=lambda loc: [str(p) for p in loc])


def delete_path(body: Any, path: Sequence[str | int]) -> bool:
    """Delete the key at a literal ``path``; False (nothing changed) if it cannot be walked.

    An empty path, a missing key, an out-of-range, negative or bool index, or a part that is
    not a key of the node all give False.
    """
    if not path:
        return False
    node = body
    for part in path[:-1]:
        if not _is_step(node, part):
            return False
        node = node[part]
    last = path[-1]
    if isinstance(node, dict) and isinstance(last, str) and last in node:
        del node[last]
        return True
    return False


def validate_pruning(
    validate: Callable[[Any], T],
    body: Any,
    removals: Removals,
    *,
    prefix: Sequence[str | int] = (),
) -> T:
    """Run ``validate(body)``; on failure prune removable unknown keys of ``body`` IN PLACE
    (each recorded in ``removals`` at its place in the client's body, path prefixed with
    ``prefix``) and retry. Errors pruning
    cannot fix are re-raised as pydantic reported them. ``body`` must be the caller's private
    copy."""
    while True:
        try:
            return validate(body)
        except ValidationError as exc:
            removed = [path for path in plan_pruning(body, exc) if delete_path(body, path)]
            if not removed:
                raise
            for path in removed:
                removals.add_cleaned((*prefix, *path), "unknown key")
