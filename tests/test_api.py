"""The public surface and the layering rule."""

from __future__ import annotations

import ast
import pathlib
import re

import pytest

import aiostream_synth

PACKAGE = pathlib.Path(aiostream_synth.__file__).parent
#: The layers, bottom up: each is a folder and may import only the ones before it.
LAYERS = ["_wire", "_params", "_dialects", "_engine", "_store", "_serving", "_proxy"]
#: The pure core (framing, params, dialects): no anyio, no engine, no web framework.
CORE = LAYERS[:3]
FORBIDDEN_IN_CORE = {
    "anyio",
    "trio",
    "asyncio",
    "sniffio",
    "starlette",
    "sse_starlette",
    "httpx",
    "httpx2",
}
#: Words that name a dialect, which the dialect-agnostic layers must not contain (P11).
DIALECT_WORDS = re.compile(
    r"ChatDialect|ResponsesDialect|AnthropicDialect|_dialects\.(chat|responses|anthropic)\b"
    r"|[\"'](chat|responses|anthropic)[\"']"
)


def test_all_is_sorted_and_complete() -> None:
    """__all__ is sorted, names only what exists, and every public name is in it."""
    names = aiostream_synth.__all__

    # isort-style, as ruff's RUF022 keeps it: CONSTANTS, then Classes, then functions.
    def kind(name: str) -> int:
        bare = name.strip("_")
        return 0 if bare.isupper() else 1 if bare[:1].isupper() else 2

    assert names == sorted(names, key=lambda n: (kind(n), n))
    for name in names:
        assert hasattr(aiostream_synth, name)
    # Each name is imported on first use (PEP 562): where it comes from is checked once here.
    assert set(aiostream_synth._EXPORTS) == set(names) - {"__version__"}
    assert "__version__" in dir(aiostream_synth)
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = aiostream_synth.nope  # type: ignore[attr-defined]
    public = {n for n in vars(aiostream_synth) if not n.startswith("_")}
    modules = {n for n in public if isinstance(getattr(aiostream_synth, n), type(aiostream_synth))}
    assert public - modules - {"annotations"} <= set(names)


def _modules(folder: str) -> list[pathlib.Path]:
    return sorted((PACKAGE / folder).rglob("*.py"))


def _imports(path: pathlib.Path) -> set[str]:
    tree = ast.parse(path.read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert not node.level, f"{path}: relative import"
            found.add(node.module or "")
    return found


def _code(path: pathlib.Path) -> str:
    """The module's code without docstrings and comments (prose may name dialects)."""
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (
            isinstance(body, list)
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            body[0] = ast.Pass()
    return ast.unparse(tree)


def _layer(name: str) -> str | None:
    """The layer folder an absolute import of this package belongs to."""
    parts = name.split(".")
    if parts[0] != "aiostream_synth" or len(parts) < 2:
        return None
    return parts[1]


def test_every_module_is_in_a_layer() -> None:
    """Modules live in the layer folders; at the top only the front door and public submodules."""
    top = {p.name for p in PACKAGE.glob("*.py")}
    assert top == {"__init__.py", "__main__.py", "starlette.py"}
    folders = {p.name for p in PACKAGE.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert folders == set(LAYERS)


def test_each_layer_imports_only_layers_below() -> None:
    """Dependencies point down, folder by folder (a test can rely on it, a newcomer too)."""
    for rank, layer in enumerate(LAYERS):
        allowed = set(LAYERS[: rank + 1])
        for path in _modules(layer):
            used = {_layer(name) for name in _imports(path)} - {None}
            assert used <= allowed, f"{path.relative_to(PACKAGE)} imports {used - allowed}"


def test_core_modules_do_not_import_anyio_or_web_frameworks() -> None:
    """The pure core never imports anyio, an event loop or a web framework."""
    for layer in CORE:
        for path in _modules(layer):
            bad = {n for n in _imports(path) if n.split(".")[0] in FORBIDDEN_IN_CORE}
            assert not bad, f"{path.relative_to(PACKAGE)} imports {bad}"


def test_the_native_path_never_imports_starlette() -> None:
    """The native ASGI adapter needs no web framework (only the sse-starlette adapter does)."""
    used = {n.split(".")[0] for n in _imports(PACKAGE / "_serving" / "asgi.py")}
    assert not {"starlette", "sse_starlette"} & used


def test_engine_serving_and_proxy_know_no_dialect_by_name() -> None:
    """Decision P11: above the dialects, code talks to the dialect interface only. Dialects are
    found through the registry; the proxy's embedded model and upstream client are backends
    (they speak each API) and are the only exceptions."""
    exempt = {"embedded.py", "upstream.py"}
    for layer in ("_engine", "_serving", "_proxy"):
        for path in _modules(layer):
            if path.name in exempt:
                continue
            found = DIALECT_WORDS.search(_code(path))
            assert found is None, f"{path.relative_to(PACKAGE)} names a dialect: {found.group(0)!r}"


def test_package_is_typed() -> None:
    """py.typed ships with the package."""
    assert (PACKAGE / "py.typed").exists()


#: Names of the specification documents this project was built from, and their statement ids
#: (B-R13, D8, §1.7): they are not in the repository, so the code must not send a reader there.
SPEC_REFERENCES = re.compile(
    r"\b(?:bridge|anthropic|clients|protocol|decisions)\.md\b|\bB-[A-Z]+\d|\bD\d{1,2}\b"
    r"|(?<!RFC \d{4} )§\d"
)
DECISIONS = PACKAGE.parents[1] / "docs" / "design" / "decisions.md"


def test_the_code_cites_only_documents_in_the_repository() -> None:
    """Decisions are cited as "decision Pn", each a section of docs/design/decisions.md."""
    documents = [*PACKAGE.rglob("*.py"), PACKAGE.parents[1] / "ARCHITECTURE.md"]
    sections = set(re.findall(r"^## (P\d+)\.", DECISIONS.read_text(encoding="utf-8"), re.M))
    assert sections == {f"P{n}" for n in range(1, 13)}
    for path in documents:
        text = path.read_text(encoding="utf-8")
        found = SPEC_REFERENCES.search(text)
        assert found is None, f"{path.name} cites {found.group(0)!r}, not in the repository"
        for cited in re.findall(r"[Dd]ecisions? (P\d+)", text):
            assert cited in sections, f"{path.name} cites decision {cited}, which is not written"
