"""Validate-with-pruning: drop fields newer than our params types, keep every real error.

pydantic reports an unknown key as ``extra_forbidden`` at its location. Inside a union the
location also carries the *arm label* (``tools.12.web_search.WebSearchToolParam.x``), which is
not a key of the body, and every arm of the union reports its own errors. :func:`plan_pruning`
therefore walks the body and the error locations together:

* a location part that exists in the body (a dict key, an in-range list index) is followed;
* any other part is an arm label: the errors under one union are grouped by arm, and the arm
  whose errors are *all* removable unknown keys, with the fewest of them, is chosen; if no arm
  can be fixed by pruning, nothing under that union is pruned and the error stands.

A key is therefore only ever removed when removing it makes a whole union member valid, which
keeps e.g. a function tool's ``name`` from being "pruned" because the web-search arm does not
know it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from pydantic import ValidationError

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


def _plan(node: Any, errors: list[tuple[Loc, str]]) -> tuple[list[Loc], bool]:
    deletions: list[Loc] = []
    fixable = True
    children: dict[str | int, list[tuple[Loc, str]]] = {}
    arms: dict[str | int, list[tuple[Loc, str]]] = {}
    for loc, kind in errors:
        if not loc:
            fixable = False
        elif _is_step(node, loc[0]):
            if len(loc) == 1:
                if kind == "extra_forbidden" and isinstance(node, dict):
                    deletions.append(loc)
                else:
                    fixable = False
            else:
                children.setdefault(loc[0], []).append((loc[1:], kind))
        else:
            arms.setdefault(loc[0], []).append((loc[1:], kind))
    for key, sub_errors in children.items():
        sub_deletions, sub_fixable = _plan(node[key], sub_errors)
        deletions.extend((key, *path) for path in sub_deletions)
        fixable = fixable and sub_fixable
    if arms:
        best: list[Loc] | None = None
        for arm_errors in arms.values():
            arm_deletions, arm_fixable = _plan(node, arm_errors)
            if arm_fixable and (best is None or len(arm_deletions) < len(best)):
                best = arm_deletions
        if best is None:
            fixable = False
        else:
            deletions.extend(best)
    return deletions, fixable


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
    not a key of the node all give False (D10).
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
    logger: logging.Logger,
    *,
    prefix: Sequence[str | int] = (),
    pruned: list[str] | None = None,
) -> T:
    """Run ``validate(body)``; on failure prune removable unknown keys of ``body`` IN PLACE
    (one WARNING each, dotted path) and retry. Errors pruning cannot fix are re-raised as
    pydantic reported them. ``body`` must be the caller's private copy."""
    while True:
        try:
            return validate(body)
        except ValidationError as exc:
            removed = [path for path in plan_pruning(body, exc) if delete_path(body, path)]
            if not removed:
                raise
            for path in removed:
                name = dotted((*prefix, *path))
                logger.warning("pruned field %s: not in the params model", name)
                if pruned is not None:
                    pruned.append(name)
