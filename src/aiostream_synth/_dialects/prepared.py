"""What request preparation produces, shared by every dialect (no I/O).

A parsed body becomes a :class:`PreparedRequest` (what the backend is called with, and what was
removed on the way, decision P10) or a :class:`~aiostream_synth.RequestError`: malformed JSON, a
body that is not an object, a params validation error (400, ``param`` naming the path in the
client's own body, OpenAI style: ``tools[0].name``), a body over the size limit (413, raised by
the adapter that reads it).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson
from pydantic import ValidationError

from aiostream_synth._dialects.names import Dialect
from aiostream_synth._params.removals import Removals, format_path
from aiostream_synth._params.strict import KIND_KEYS, is_arm_label
from aiostream_synth._wire.errors import RequestError
from aiostream_synth._wire.limits import DEFAULT_MAX_BODY_BYTES

__all__ = [
    "DEFAULT_MAX_BODY_BYTES",
    "BridgedRequest",
    "Dialect",
    "PreparedRequest",
    "SanitizeOptions",
    "parse_json_body",
    "validation_error",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class SanitizeOptions:
    """Deprecated (for one release): the request-preparation switches of the Responses and
    Anthropic dialects, which are now their own options (``ResponsesOptions.drop_custom_tools``,
    ``drop_hosted_tools``, ``hoist_carrier_custom_tools``; ``AnthropicOptions.system_messages``,
    ``allow_unchecked_auto_mode``). Still taken by ``StreamSettings(sanitize=...)`` and
    ``prepare_request(sanitize=...)``, with a ``DeprecationWarning``."""

    drop_custom_tools: bool = False
    drop_hosted_tools: bool = False
    hoist_carrier_custom_tools: bool = False
    #: Anthropic ``role: "system"`` messages: folded into the user turn as
    #: ``<system-reminder>`` text (default), forwarded, or refused with a 400.
    anthropic_system_messages: Literal["translate", "forward", "reject"] = "translate"
    #: Anthropic: strip Claude Code's ``safeguards`` (auto mode without its classifier)
    #: instead of refusing the request.
    allow_unchecked_auto_mode: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class BridgedRequest:
    """A request converted for an upstream that speaks another dialect (a bridge's output)."""

    #: The upstream's dialect: what the backend is called in.
    dialect: Dialect
    #: The upstream request (always non-streaming).
    params: dict[str, Any]
    #: The upstream's complete result -> the result in the client's dialect (raises
    #: ``BackendError`` for an answer that is a failure, ``InvalidResultError`` for garbage).
    convert: Callable[[Any], Any]
    #: A result made without calling the upstream (an empty probe request), or None.
    local_result: Any = None
    #: Added to the client dialect's keepalive skeleton (``created_at``, so the keepalive
    #: envelopes and the converted result agree).
    echo: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class PreparedRequest:
    """A request ready for the backend.

    ``params`` is what the backend receives: for a streaming request the sanitized, validated
    non-streaming params; otherwise the client's body as the dialect forwards it.
    """

    dialect: Dialect
    stream: bool
    #: Generated to its end whatever the client does, its events kept in a store for any
    #: reader (Responses' ``background: true``; decision P12). ``stream`` says whether the
    #: creating client reads them as they come or gets the response object at once.
    background: bool = False
    params: dict[str, Any]
    #: What the dialect keeps of the request for its own stream (opaque to every other layer:
    #: chat's ``include_usage``, the Responses namespace map).
    state: Any = None
    #: Skeleton fields for keepalive envelopes (``model`` and request echoes).
    echo: dict[str, Any] = field(default_factory=dict)
    #: Everything removed on the way (unknown fields and keys, tools and items of unknown type,
    #: configured drops), with reasons; see :mod:`aiostream_synth._params.removals`.
    removals: Removals = field(default_factory=Removals)
    #: The client's parsed body (what coalescing identifies a generation by).
    body: Mapping[str, Any] = field(default_factory=dict)
    #: Set when the backend speaks another dialect: the converted call and the way back.
    bridged: BridgedRequest | None = None

    @property
    def dropped(self) -> tuple[str, ...]:
        """The paths of everything removed (``client_metadata``, ``tools[8]``, ``input[0].id``)."""
        return tuple(self.removals.paths)


def parse_json_body(raw: bytes) -> dict[str, Any]:
    """The request body as a JSON object, or a 400 :class:`RequestError`."""
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise RequestError(
            400, f"We could not parse the JSON body of your request: {exc}"
        ) from None
    if not isinstance(body, dict):
        raise RequestError(
            400, f"The request body must be a JSON object, not {type(body).__name__}."
        )
    # Fewer brackets than the limit cannot nest deeper than it (a count at C speed); more are
    # checked by orjson encoding the body (its limit is ours: 8 µs for a 48 KB Codex turn,
    # where walking it takes 90), and walked only when that fails (a big integer fails too).
    if raw.count(b"[") + raw.count(b"{") > MAX_JSON_DEPTH and not _encodes(body):
        raise RequestError(
            400,
            f"The JSON body of your request nests more than {MAX_JSON_DEPTH} arrays or "
            "objects deep, which is not supported.",
        )
    return body


#: The deepest nesting of arrays and objects a request body may have: what orjson encodes (255
#: levels fail; every body is serialized again on its way to the backend) and far beyond any
#: real request.
MAX_JSON_DEPTH = 254


def _encodes(body: Any) -> bool:
    """Whether ``body`` nests no deeper than :data:`MAX_JSON_DEPTH`."""
    try:
        orjson.dumps(body)
    except orjson.JSONEncodeError:
        return _depth(body) <= MAX_JSON_DEPTH
    return True


def _depth(value: Any) -> int:
    """How deep ``value``'s arrays and objects nest, walked without recursion (a body nested
    800 deep must not exhaust the interpreter's stack); stops early past the limit."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > deepest:
            deepest = depth
            if deepest > MAX_JSON_DEPTH:
                break
        children = node.values() if isinstance(node, dict) else node
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return deepest


def _literal_path(body: Any, loc: Sequence[str | int]) -> tuple[str | int, ...]:
    """The literal path of an error location in ``body``, union-arm labels left out."""
    parts: list[str | int] = []
    node = body
    last = len(loc) - 1
    for i, part in enumerate(loc):
        if is_arm_label(part):
            continue
        in_dict = isinstance(node, dict) and isinstance(part, str) and part in node
        in_list = isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node)
        if in_dict or in_list:
            node = node[part]
        elif isinstance(node, dict) and i == last:
            pass  # a missing field: the location's last part, not in the body
        else:
            continue  # a caller model's arm label (after a scalar, everything left is a label)
        parts.append(part)
    return tuple(parts)


#: Errors saying an object is of no kind its union knows (ours, and pydantic's own).
_KIND_ERRORS = frozenset({"invalid_kind", "union_tag_invalid", "union_tag_not_found"})


def _value_at(body: Any, path: Sequence[str | int]) -> Any:
    node = body
    for part in path:
        try:
            node = node[part]
        except (KeyError, IndexError, TypeError):
            return None
    return node


class _ErrorTree:
    """A validation error's locations, for choosing the errors of the arms that fit best."""

    def __init__(self, body: Any, errors: list[Any]) -> None:
        self.body = body
        self.errors = errors
        self.locs = [tuple(error["loc"]) for error in errors]
        self.paths = [_literal_path(body, loc) for loc in self.locs]

    def _says_other_kind(self, i: int, start: int) -> bool:
        """Whether error ``i`` (in the arm whose location ends before ``start``) says the value
        is not of that arm's kind: an error at the value itself or at its ``type`` / ``role``.
        An object of no known ``type`` is of the arm's kind (objects), with a wrong ``type``."""
        bare = [part for part in self.locs[i][start:] if not is_arm_label(part)]
        if bare and not (len(bare) == 1 and bare[0] in KIND_KEYS):
            return False
        kind = self.errors[i]["type"]
        return not (kind in _KIND_ERRORS and isinstance(_value_at(self.body, self.paths[i]), dict))

    def pick(self, indexes: list[int], depth: int = 0) -> list[int]:
        """The errors of ``indexes`` (sharing a location up to ``depth``) that the best arm
        of every union on their way reports: arms of another kind passed over, then the arm
        with the fewest errors."""
        here = [i for i in indexes if len(self.locs[i]) > depth]
        if (
            here
            and len(here) == len(indexes)
            and all(is_arm_label(self.locs[i][depth]) for i in here)
        ):
            arms: dict[Any, list[int]] = {}
            for i in here:
                arms.setdefault(self.locs[i][depth], []).append(i)
            fitting = [
                arm
                for arm in arms.values()
                if not any(self._says_other_kind(i, depth + 1) for i in arm)
            ] or list(arms.values())
            best = min(fitting, key=len)
            return self.pick(best, depth + 1)
        chosen = [i for i in indexes if len(self.locs[i]) <= depth]
        groups: dict[Any, list[int]] = {}
        for i in here:
            groups.setdefault(self.locs[i][depth], []).append(i)
        for group in groups.values():
            chosen.extend(self.pick(group, depth + 1))
        return chosen


def validation_error(
    body: dict[str, Any], exc: ValidationError, removals: Removals
) -> RequestError:
    """A 400 for the most specific error, named by its path in the client's body.

    Of a union's arms, those of another kind than the value (a string arm for an object, a
    message arm for a ``role`` it does not take) are passed over; then the error reaching
    deepest into the body wins, a wrong value before an unknown key. A wrong ``type`` /
    ``role`` is named at that key."""
    tree = _ErrorTree(body, exc.errors(include_url=False))
    errors, paths = tree.errors, tree.paths
    chosen = tree.pick(list(range(len(errors))))
    best = max(chosen, key=lambda i: (len(paths[i]), errors[i]["type"] != "extra_forbidden", -i))
    path = paths[best]
    key = (errors[best].get("ctx") or {}).get("discriminator")
    if errors[best]["type"] in _KIND_ERRORS and isinstance(key, str):
        path = (*path, key.strip("'"))  # pydantic's own quotes the key: "'role'"
    param = format_path(removals.original_path(path)) or None
    first = errors[best]
    more = len(chosen) - 1
    suffix = f" (and {more} more error{'s' if more > 1 else ''})" if more else ""
    return RequestError(
        400,
        f"Invalid value for {param or 'the request'}: {first['msg']}{suffix}",
        param=param,
        code=first["type"],
    )
