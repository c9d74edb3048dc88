"""MkDocs hooks (``hooks:`` in mkdocs.yml): the reference pages made from the code itself.

A page holds a marker line, replaced when the site is built:

* ``<!-- include: PATH -->``: a Markdown file of the repository (ARCHITECTURE.md, the
  changelogs, the benchmarks' README), its links to other files of the repository rewritten
  to their pages on the site (:data:`_SITE_PAGES`), so both places keep working links;
* ``<!-- generated: serve-options -->``: every option of ``aiostream-synth serve`` (and
  ``demo``), read from the CLI's own argparse parser, so the page says what ``--help`` says;
* ``<!-- generated: metrics -->``: every series ``GET /metrics`` exposes, read from the
  exposition the proxy renders;
* ``<!-- generated: top-level -->``: the names ``aiostream_synth`` itself exports, each
  linked to its entry under its public module;
* ``<!-- generated: refusals -->``: every message a refused request can get, read from the
  source (each ``RequestError`` / ``BridgeError`` raised with a literal message).

The benchmark plots (``benchmarks/plots/``) are added to the site beside the benchmarks page.
"""

from __future__ import annotations

import argparse
import ast
import html
import os
import re
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parent.parent
_MARKER = re.compile(r"^<!-- generated: ([a-z-]+) -->$", re.MULTILINE)
_INCLUDE = re.compile(r"^<!-- include: (\S+) -->$", re.MULTILINE)
#: Repository files included in the site -> the page (under docs/) that shows them.
_SITE_PAGES = {
    "ARCHITECTURE.md": "design/architecture.md",
    "CHANGELOG.md": "changelog/index.md",
    "benchmarks/README.md": "design/benchmarks.md",
    "benchmarks/HISTORY.md": "changelog/benchmarks.md",
    "benchmarks/COSTS.md": "design/costs.md",
    "README.md": "index.md",
}
_LINK = re.compile(r"\]\(([^)#\s]+)(#[^)\s]*)?\)")


def include(path: str, page: str) -> str:
    """The repository file ``path`` as the page ``page`` (under docs/) shows it."""
    source = ROOT / path
    here = Path(page).parent

    def relink(match: re.Match[str]) -> str:
        target, anchor = match.group(1), match.group(2) or ""
        if "://" in target:
            return match.group(0)
        in_repo = (source.parent / target).resolve().relative_to(ROOT).as_posix()
        if in_repo in _SITE_PAGES:
            moved = os.path.relpath(_SITE_PAGES[in_repo], here)
        elif in_repo.startswith("benchmarks/plots/"):
            moved = os.path.relpath(f"design/plots/{Path(in_repo).name}", here)
        else:
            raise ValueError(f"{path} links to {target}, which is not on the site")
        return f"]({Path(moved).as_posix()}{anchor})"

    return _LINK.sub(relink, source.read_text(encoding="utf-8"))


def _text(text: str) -> str:
    """Plain text as Markdown shows it as written (``<OPTION>`` is not an HTML tag)."""
    return html.escape(text, quote=False)


def _cell(text: str) -> str:
    return _text(text).replace("|", "\\|").replace("\n", " ")


def _parser() -> argparse.ArgumentParser:
    """The CLI's parser as a fresh environment builds it (no ``AIOSTREAM_SYNTH_*`` values)."""
    from aiostream_synth._proxy import cli

    saved = {k: v for k, v in os.environ.items() if k.startswith("AIOSTREAM_SYNTH_")}
    for key in saved:
        del os.environ[key]
    try:
        return cli._parser()
    finally:
        os.environ.update(saved)


def _commands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    raise LookupError("the CLI parser has no subcommands")


def _option_rows(group: argparse._ArgumentGroup) -> list[str]:
    rows = []
    for action in group._group_actions:
        if isinstance(action, argparse._HelpAction) or not action.option_strings:
            continue
        flags = ", ".join(f"`{flag}`" for flag in action.option_strings)
        if action.choices:
            values = " \\| ".join(f"`{choice}`" for choice in action.choices)
        elif isinstance(action, argparse.BooleanOptionalAction):
            values = "flag"
        else:
            kind = getattr(action.type, "__name__", "str") if action.type else "str"
            values = {"str": "text", "int": "integer", "float": "number"}.get(kind, kind)
        rows.append(f"| {flags} | {values} | {_cell(action.help or '')} |")
    return rows


def serve_options() -> str:
    """The option tables of every ``aiostream-synth`` command, grouped as ``--help`` groups them."""
    out: list[str] = []
    for name, command in _commands(_parser()).items():
        out += [f"## `aiostream-synth {name}`", "", _text(command.description or ""), ""]
        for group in command._action_groups:
            rows = _option_rows(group)
            if not rows:
                continue
            title = group.title or ""
            if title not in ("options", "optional arguments"):
                out += [f"### {title[0].upper()}{title[1:]}", ""]
            out += ["| option | values | what it does |", "|---|---|---|", *rows, ""]
    return "\n".join(out)


def metrics() -> str:
    """A table of every series of ``GET /metrics``, with its labels."""
    from aiostream_synth._proxy.metrics import Metrics, StoreFigures

    sample = Metrics()
    sample.record(
        "chat",
        True,
        "completed",
        keepalives=0,
        bytes_sent=0,
        duration=0.0,
        upstream_latency=0.0,
        dropped=[("tool", "web_search")],
    )
    figures = StoreFigures(0, 0, held=0, held_bytes=0, evicted=0, expired=0)
    text = sample.render(open_streams=0, store=figures)
    helps = dict(re.findall(r"^# HELP (\S+) (.*)$", text, re.MULTILINE))
    kinds = dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.MULTILINE))
    labels: dict[str, list[str]] = {}
    for series, inner in re.findall(r"^(\w+)\{([^}]*)\}", text, re.MULTILINE):
        base = re.sub(r"_(bucket|sum|count)$", "", series) if series not in helps else series
        names = [pair.split("=", 1)[0] for pair in inner.split(",")]
        labels.setdefault(base, [n for n in names if n != "le"])
    rows = ["| series | type | labels | what it counts |", "|---|---|---|---|"]
    for name, about in helps.items():
        shown = ", ".join(f"`{label}`" for label in labels.get(name, [])) or "—"
        rows.append(f"| `{name}` | {kinds[name]} | {shown} | {_cell(about)} |")
    return "\n".join(rows)


#: Calls that refuse a request -> (the status argument's position, or None for a call whose
#: status is fixed; that fixed status; the message argument's position).
_REFUSALS: dict[str, tuple[int | None, int, int]] = {
    "RequestError": (0, 0, 1),
    "error_response": (0, 0, 1),
    "BridgeError": (None, 400, 0),
    "_refuse": (None, 400, 0),
}


def _literal(node: ast.expr) -> str | None:
    """A message as written: its text, ``…`` for each interpolated value; None if no string."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(
            part.value if isinstance(part, ast.Constant) and isinstance(part.value, str) else "…"
            for part in node.values
        )
    return None


def _message_tables(tree: ast.Module) -> dict[str, dict[str, str]]:
    """A module's top-level dicts of literal messages (``{"prompt": "prompt templates ..."}``)."""
    tables: dict[str, dict[str, str]] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict):
            pairs = [
                (_literal(k) if k is not None else None, _literal(v))
                for k, v in zip(node.value.keys, node.value.values, strict=True)
            ]
            table = {k: v for k, v in pairs if k is not None and v is not None}
            if table and len(table) == len(pairs):
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        tables[target.id] = table
    return tables


def _refusal(node: ast.Call) -> tuple[int, ast.expr, ast.expr | None] | None:
    """A refusing call's status, message and ``param`` arguments (None for another call)."""
    func = node.func
    name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
    if name not in _REFUSALS:
        return None
    status_at, status, message_at = _REFUSALS[name]
    if len(node.args) <= message_at:
        return None
    if status_at is not None:
        argument = node.args[status_at]
        if not (isinstance(argument, ast.Constant) and isinstance(argument.value, int)):
            return None
        status = argument.value
    params = [k.value for k in node.keywords if k.arg == "param"]
    if name == "_refuse" and len(node.args) > 1:
        params = [node.args[1]]
    return status, node.args[message_at], params[0] if params else None


def refusals() -> str:
    """A table of every refusal message in the source, by status: the literal messages of each
    ``RequestError`` / ``BridgeError`` raised, and those a loop raises from a table of them."""
    found: set[tuple[int, str, str]] = set()
    package = ROOT / "src" / "aiostream_synth"
    for path in sorted(package.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        tables = _message_tables(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and (refusal := _refusal(node)) is not None:
                status, message, param = refusal
                text = _literal(message)
                if text is not None:
                    named = _literal(param) if param is not None else None
                    found.add((status, " ".join(text.split()), named or ""))
            # for key, message in TABLE.items(): raise BridgeError(message, param=key)
            if (
                isinstance(node, ast.For)
                and isinstance(node.iter, ast.Call)
                and isinstance(node.iter.func, ast.Attribute)
                and isinstance(node.iter.func.value, ast.Name)
                and node.iter.func.value.id in tables
                and isinstance(node.target, ast.Tuple)
            ):
                table = tables[node.iter.func.value.id]
                for inner in ast.walk(node):
                    if isinstance(inner, ast.Call) and (refusal := _refusal(inner)) is not None:
                        status = refusal[0]
                        found.update((status, " ".join(m.split()), k) for k, m in table.items())
    rows = ["| status | message | `param` |", "|---|---|---|"]
    for code, text, name in sorted(found):
        rows.append(f"| {code} | {_cell(text)} | {f'`{name}`' if name else ''} |")
    return "\n".join(rows)


def top_level() -> str:
    """The names ``aiostream_synth`` itself exports, each linked to its entry in its module."""
    import aiostream_synth

    rows = ["| name | documented in |", "|---|---|"]
    for name in aiostream_synth.__all__:
        if name == "__version__":
            continue
        home = aiostream_synth._EXPORTS[name]
        rows.append(f"| [`{name}`][{home}.{name}] | `{home}` |")
    return "\n".join(rows)


_GENERATORS = {
    "top-level": top_level,
    "serve-options": serve_options,
    "metrics": metrics,
    "refusals": refusals,
}


def on_page_markdown(markdown: str, page: Any, **kwargs: Any) -> str:
    markdown = _INCLUDE.sub(lambda m: include(m.group(1), page.file.src_uri), markdown)

    def generated(match: re.Match[str]) -> str:
        try:
            return _GENERATORS[match.group(1)]()
        except KeyError:
            raise ValueError(f"no generator for the marker {match.group(0)!r}") from None

    return _MARKER.sub(generated, markdown)


def on_files(files: Files, config: Any, **kwargs: Any) -> Files:
    for plot in sorted((ROOT / "benchmarks" / "plots").glob("*.png")):
        files.append(File.generated(config, f"design/plots/{plot.name}", abs_src_path=str(plot)))
    return files
