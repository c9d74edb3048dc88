"""The public surface and the layering rule."""

from __future__ import annotations

import ast
import pathlib

import aiostream_synth

PACKAGE = pathlib.Path(aiostream_synth.__file__).parent
#: The pure core: synthesis, sanitizing, framing. No anyio, no engine, no web framework.
CORE = [
    "_chat_sanitize",
    "_chat_synthesis",
    "_coerce",
    "_dispatch",
    "_errors",
    "_failures",
    "_json",
    "_namespaces",
    "_params",
    "_params_view",
    "_pruning",
    "_removals",
    "_replay",
    "_requests",
    "_responses_sanitize",
    "_responses_synthesis",
    "_sse",
    "_strict_types",
    "_usage",
    "_validation",
]
ENGINE = ["_engine", "_loops", "_shutdown", "_tick"]
ADAPTERS = ["_asgi"]  # and the public submodule starlette.py
PROXY = ["_proxy", "_upstream", "_embedded", "_metrics", "_serve"]
COMMAND_LINE = ["_cli", "__main__"]
FORBIDDEN_IN_CORE = {
    "anyio",
    "trio",
    "asyncio",
    "starlette",
    "sse_starlette",
    "httpx",
    "aiostream_synth._engine",
}


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
    public = {n for n in vars(aiostream_synth) if not n.startswith("_")}
    modules = {n for n in public if isinstance(getattr(aiostream_synth, n), type(aiostream_synth))}
    assert public - modules - {"annotations"} <= set(names)


def _imports(module: str) -> set[str]:
    tree = ast.parse((PACKAGE / f"{module}.py").read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            found.add(f"aiostream_synth.{base}" if node.level else base)
    return found


def test_core_modules_do_not_import_higher_layers() -> None:
    """Dependencies point down: the core never imports the engine, anyio or a web framework."""
    for module in CORE:
        imported = _imports(module)
        bad = {
            name
            for name in imported
            if name.split(".")[0] in FORBIDDEN_IN_CORE or name in FORBIDDEN_IN_CORE
        }
        assert not bad, f"{module} imports {bad}"


def test_every_module_is_classified() -> None:
    """A new module must be placed in a layer here."""
    modules = {p.stem for p in PACKAGE.glob("_*.py")} - {"__init__"}
    assert {p.stem for p in PACKAGE.glob("[!_]*.py")} == {"starlette"}
    assert modules == {*CORE, *ENGINE, *ADAPTERS, *PROXY, *COMMAND_LINE}


def test_each_layer_imports_only_layers_below() -> None:
    """engine ↛ adapters, CLI; adapters ↛ CLI; the native path never imports starlette."""
    above_engine = {f"aiostream_synth.{m}" for m in [*ADAPTERS, "starlette", *COMMAND_LINE]}
    for module in ENGINE:
        assert not above_engine & _imports(module), module
    for module in [*ADAPTERS, "starlette"]:
        above = {f"aiostream_synth.{m}" for m in [*PROXY, *COMMAND_LINE]}
        assert not above & _imports(module), module
    for module in PROXY:
        assert not {f"aiostream_synth.{m}" for m in COMMAND_LINE} & _imports(module), module
    assert not {"starlette", "sse_starlette"} & {n.split(".")[0] for n in _imports("_asgi")}


def test_package_is_typed() -> None:
    """py.typed ships with the package."""
    assert (PACKAGE / "py.typed").exists()
