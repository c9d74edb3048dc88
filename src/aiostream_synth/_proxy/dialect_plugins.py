"""Dialects from outside the package: ``serve --dialect MODULE:ATTR`` and their options.

A reference names a :class:`~aiostream_synth._dialects.base.DialectSpec` instance
(``my_pkg.gemini:SPEC``); loading imports the module and registers the spec. Its options (the
dataclass its ``options_type`` names) become ``serve`` options ``--<dialect>-<field>``, each
also read from ``AIOSTREAM_SYNTH_<DIALECT>_<FIELD>``, typed and documented by the field itself
(``metadata["help"]``). Nothing here is imported when no dialect is loaded: ``serve --help``
stays free of the SDK types.
"""

from __future__ import annotations

import dataclasses
import importlib
import re
import types
import typing
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from aiostream_synth._dialects.base import DialectSpec

__all__ = [
    "DialectOption",
    "build_dialect_options",
    "check_bridges",
    "check_reference",
    "dialect_option_fields",
    "load_dialects",
]

_REFERENCE = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*\Z")


def check_reference(reference: str) -> None:
    """``ValueError`` unless ``reference`` reads ``MODULE:ATTR`` (``my_pkg.gemini:SPEC``)."""
    if not _REFERENCE.match(reference):
        raise ValueError(
            "a dialect is named MODULE:ATTR, the module to import and its spec instance "
            f"(my_pkg.gemini:SPEC), not {reference!r}"
        )


def check_bridges(upstream_api: str) -> None:
    """``ValueError`` unless a bridge serves every registered dialect from an upstream that
    speaks ``upstream_api`` (a plug-in dialect has no bridge to or from the others)."""
    from aiostream_synth._dialects.bridges.registry import bridge_for
    from aiostream_synth._dialects.registry import registered_dialects, spec_for

    spec_for(upstream_api)  # an unknown name says which ones there are
    for spec in registered_dialects():
        bridge_for(spec.name, upstream_api)


def load_dialects(references: Iterable[str]) -> list[DialectSpec]:
    """Import and register the dialect each ``MODULE:ATTR`` names (``ValueError`` saying
    which one could not be loaded and why); loading one again changes nothing."""
    from aiostream_synth._dialects.registry import register_dialect

    specs = []
    for reference in references:
        check_reference(reference)
        module_name, _, attribute = reference.partition(":")
        try:
            found: Any = importlib.import_module(module_name)
            for part in attribute.split("."):
                found = getattr(found, part)
        except (ImportError, AttributeError) as exc:
            raise ValueError(f"dialect {reference}: {exc}") from None
        missing = [
            name
            for name in (
                "name",
                "paths",
                "from_target",
                "prepare",
                "stream_dialect",
                "upstream_headers",
            )
            if not hasattr(found, name)
        ]
        if isinstance(found, type) or missing:
            raise ValueError(
                f"dialect {reference} is not a dialect spec instance "
                f"(missing: {', '.join(missing) or 'an instance, not the class'})"
            )
        specs.append(register_dialect(found))
    return specs


@dataclasses.dataclass(frozen=True, slots=True)
class DialectOption:
    """One field of a dialect's options, as a ``serve`` option."""

    dialect: str
    field: str
    #: The value's type: bool, int, float or str (a Literal's values are ``choices``).
    kind: type
    default: Any
    help: str
    choices: tuple[str, ...] | None = None
    #: None is a value too: ``none`` on the command line.
    optional: bool = False
    #: 0 on the command line means None (``metadata["zero_is_none"]``: "0: no limit").
    zero_is_none: bool = False
    #: Its name on the command line and in the environment when not ``<dialect>_<field>``
    #: (``metadata["cli_name"]``: an option older than the dialect's own options).
    cli_name: str | None = None

    @property
    def dest(self) -> str:
        """The argparse destination (no option of ProxyConfig's can take it)."""
        return f"dialect__{self.dialect}__{self.field}"

    @property
    def flag(self) -> str:
        return "--" + (self.cli_name or f"{self.dialect}_{self.field}").replace("_", "-")

    @property
    def env(self) -> str:
        return (self.cli_name or f"{self.dialect}_{self.field}").upper()


def dialect_option_fields(name: str, kind: type[Any] | None) -> list[DialectOption]:
    """The ``serve`` options of dialect ``name``'s options dataclass ``kind`` (``TypeError``
    for a field whose type no command line can give: one of bool, int, float, str, a Literal
    of strings, or one of the last four or None)."""
    if kind is None:
        return []
    if not dataclasses.is_dataclass(kind):
        raise TypeError(f"dialect {name}: options_type must be a dataclass, not {kind!r}")
    hints = typing.get_type_hints(kind)
    options = []
    for f in dataclasses.fields(kind):
        if not f.init:
            continue
        hint = hints[f.name]
        optional = False
        if typing.get_origin(hint) in (typing.Union, types.UnionType):
            arms = [arm for arm in typing.get_args(hint) if arm is not type(None)]
            optional = len(arms) < len(typing.get_args(hint))
            hint = arms[0] if len(arms) == 1 else hint
        choices = None
        if typing.get_origin(hint) is Literal and all(
            isinstance(value, str) for value in typing.get_args(hint)
        ):
            choices, hint = tuple(typing.get_args(hint)), str
        if hint not in (bool, int, float, str) or (hint is bool and optional):
            raise TypeError(
                f"dialect {name}: option {f.name} has type {hints[f.name]!r}; a "
                "command-line option is bool, int, float, str, a Literal of strings, or one "
                "of the last four or None"
            )
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            raise TypeError(f"dialect {name}: option {f.name} needs a default")
        options.append(
            DialectOption(
                dialect=name,
                field=f.name,
                kind=hint,
                default=default,
                help=str(f.metadata.get("help", "")),
                choices=choices,
                optional=optional,
                zero_is_none=bool(f.metadata.get("zero_is_none")),
                cli_name=f.metadata.get("cli_name"),
            )
        )
    return options


def build_dialect_options(
    specs: Iterable[DialectSpec], values: Mapping[str, Mapping[str, Any]]
) -> dict[str, Any]:
    """``{dialect name: its options instance}`` for every dialect with options, from
    ``values`` (``{dialect: {field: value}}``, defaults for what is not there); ``ValueError``
    naming a dialect or a field nobody defines, or a value its options refuse."""
    by_name = {spec.name: spec for spec in specs}
    for name in values:
        if name not in by_name or by_name[name].options_type is None:
            raise ValueError(f"dialect_options names {name!r}, a dialect without options")
    built: dict[str, Any] = {}
    for name, spec in by_name.items():
        kind = spec.options_type
        if kind is None:
            continue
        given = dict(values.get(name, {}))
        known = {option.field for option in dialect_option_fields(name, kind)}
        unknown = sorted(set(given) - known)
        if unknown:
            raise ValueError(f"dialect {name} has no option {', '.join(unknown)}")
        try:
            built[name] = kind(**given)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"dialect {name} options: {exc}") from None
    return built
