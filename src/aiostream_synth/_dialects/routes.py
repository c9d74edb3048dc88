"""Which dialect answers a path: literal paths (``/v1/responses``) and templates whose
``{name}`` parts match one path segment each (``/v1beta/models/{model}:streamGenerateContent``),
for an API that carries part of a request in its URL. Pure: no I/O.
"""

from __future__ import annotations

import functools
import re
import urllib.parse
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from aiostream_synth._dialects.base import RequestTarget

if TYPE_CHECKING:
    from aiostream_synth._dialects.base import DialectSpec

__all__ = ["RequestTarget", "RouteTable", "compile_template", "fill_template", "request_target"]

#: A ``{name}`` part of a template: a Python identifier.
_PARAMETER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


@functools.lru_cache(maxsize=256)
def compile_template(template: str) -> re.Pattern[str] | None:
    """The pattern of a template (each ``{name}``: one or more characters of one path segment);
    None for a literal path. ``ValueError`` for a brace outside a valid ``{name}``, or a name
    used twice."""
    if "{" not in template and "}" not in template:
        return None
    outside = _PARAMETER.sub("", template)
    names = _PARAMETER.findall(template)
    if "{" in outside or "}" in outside or len(set(names)) != len(names):
        raise ValueError(f"a route template's parts are {{name}}, each name once, not {template!r}")
    pattern, position = "", 0
    for found in _PARAMETER.finditer(template):
        pattern += re.escape(template[position : found.start()])
        pattern += f"(?P<{found.group(1)}>[^/]+?)"
        position = found.end()
    return re.compile(pattern + re.escape(template[position:]) + r"\Z")


class RouteTable(Mapping[str, "DialectSpec"]):
    """``{path or template: spec}``, matched against a request's path: a literal path first,
    then the templates in order."""

    __slots__ = ("_routes", "_templates")

    def __init__(self, routes: Mapping[str, DialectSpec]) -> None:
        self._routes = dict(routes)
        self._templates = [
            (pattern, spec)
            for path, spec in self._routes.items()
            if (pattern := compile_template(path)) is not None
        ]

    def __getitem__(self, path: str) -> DialectSpec:
        return self._routes[path]

    def __iter__(self) -> Iterator[str]:
        return iter(self._routes)

    def __len__(self) -> int:
        return len(self._routes)

    def match(self, path: str) -> DialectSpec | None:
        """The spec answering ``path`` (no trailing slash), or None."""
        spec = self._routes.get(path)
        if spec is not None or not self._templates:
            return spec
        for pattern, candidate in self._templates:
            if pattern.match(path):
                return candidate
        return None


def request_target(spec: DialectSpec, path: str, query_string: bytes | str = b"") -> RequestTarget:
    """The target of a request ``spec`` answers: the parameters of the first of its templates
    that matches ``path`` (an ASGI path: already percent-decoded, so not decoded again), and
    the query string (parsed only if the dialect reads :attr:`RequestTarget.query`)."""
    params: dict[str, str] = {}
    for template in spec.paths:
        pattern = compile_template(template)
        found = pattern.match(path) if pattern is not None else None
        if found is not None:
            params = found.groupdict()
            break
    if isinstance(query_string, bytes):
        query_string = query_string.decode("latin-1")
    return RequestTarget(path, params, query_string)


def fill_template(template: str, params: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """Where an upstream call goes and what it sends: ``template`` (a dialect's
    ``upstream_path``) with each ``{name}`` part replaced by the string ``params[name]``
    (percent-encoded as one path segment), and ``params`` without those keys, which the path
    now carries (Gemini's API takes its model in the URL, not in the body). A literal path
    comes back with ``params`` as they are. ``ValueError`` when a part's key is missing or is
    not a non-empty string."""
    if compile_template(template) is None:
        return template, dict(params)
    body = dict(params)

    def fill(found: re.Match[str]) -> str:
        name = found.group(1)
        value = body.pop(name, None)
        if not isinstance(value, str) or not value:
            raise ValueError(
                f"the upstream path {template!r} needs {name!r} in the request, a non-empty "
                f"string, not {value!r}"
            )
        return urllib.parse.quote(value, safe="")

    return _PARAMETER.sub(fill, template), body
