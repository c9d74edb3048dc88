"""The public surface and the layering rule."""

from __future__ import annotations

import ast
import importlib
import inspect
import pathlib
import re
import subprocess
import sys
import typing

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


#: The public modules below the package (each lazy, each documented on the site).
PUBLIC_MODULES = (
    "asgi",
    "bridges",
    "dialects",
    "engine",
    "errors",
    "params",
    "proxy",
    "sse",
    "starlette",
)
#: How many names the package itself may export: what most programs need, no more (#34).
TOP_LEVEL_AT_MOST = 21


def _kind(name: str) -> int:
    """isort-style, as ruff's RUF022 keeps ``__all__``: CONSTANTS, then Classes, then functions."""
    bare = name.strip("_")
    return 0 if bare.isupper() else 1 if bare[:1].isupper() else 2


@pytest.mark.parametrize("module", ["", *PUBLIC_MODULES])
def test_all_is_sorted_and_complete(module: str) -> None:
    """__all__ is sorted, names only what exists, and every public name is in it."""
    public = importlib.import_module(f"aiostream_synth.{module}".rstrip("."))
    names = public.__all__
    assert names == sorted(names, key=lambda n: (_kind(n), n))
    for name in names:
        assert hasattr(public, name), name
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = public.nope
    if hasattr(public, "_EXPORTS"):  # lazy: where each name comes from, checked once here
        assert set(public._EXPORTS) == set(names) - {"__version__"}
        assert set(names) <= set(dir(public))
    own = {n for n in vars(public) if not n.startswith("_")}
    modules = {n for n in own if isinstance(getattr(public, n), type(public))}
    assert own - modules - {"annotations"} <= set(names)


def test_the_package_exports_a_few_names_each_documented_in_one_module() -> None:
    """The front door re-exports what most programs need from the public modules; every public
    name has exactly one home, which its ``__module__`` names."""
    assert len(aiostream_synth.__all__) <= TOP_LEVEL_AT_MOST
    homes: dict[str, str] = {}
    for module in PUBLIC_MODULES:
        public = importlib.import_module(f"aiostream_synth.{module}")
        for name in public.__all__:
            assert name not in homes, f"{name} in {homes.get(name)} and {module}"
            homes[name] = public.__name__
            value = getattr(public, name)
            if isinstance(value, type) or inspect.isfunction(value):
                assert value.__module__ == public.__name__, (name, value.__module__)
    for name in set(aiostream_synth.__all__) - {"__version__"}:
        assert aiostream_synth._EXPORTS[name] == homes[name]
        assert getattr(aiostream_synth, name) is getattr(sys.modules[homes[name]], name)


def test_old_names_still_resolve_with_a_warning() -> None:
    """Names that left the package's namespace resolve to their new home for one release, each
    with a DeprecationWarning naming it; they are neither in ``__all__`` nor in ``dir()``."""
    assert len(aiostream_synth._DEPRECATED) == 44
    for old, new in aiostream_synth._DEPRECATED.items():
        module, _, name = new.rpartition(".")
        with pytest.warns(DeprecationWarning, match=re.escape(new)):
            value = getattr(aiostream_synth, old)
        assert value is getattr(importlib.import_module(module), name)
        assert old not in aiostream_synth.__all__
        assert old not in dir(aiostream_synth)
    assert "__version__" in dir(aiostream_synth)


def test_converters_are_named_from_to_what() -> None:
    """One pattern for the bridges' conversions: ``<from>_to_<to>_<request|result>``."""
    from aiostream_synth import bridges

    apis = "(chat|responses|anthropic)"
    converters = [n for n in bridges.__all__ if "_to_" in n]
    assert len(converters) == 8
    for name in converters:
        assert re.fullmatch(rf"{apis}_to_{apis}_(request|result)", name), name


def test_the_synthesis_module_imports_without_the_sdks() -> None:
    """``aiostream_synth.sse`` is the pure layer: importing it (and the package) loads neither
    SDK, pydantic nor anyio; they come with the first use that needs them."""
    code = (
        "import sys\n"
        "import aiostream_synth\n"
        "from aiostream_synth.sse import synthesize_chat_completion_sse, synthesize_responses_sse\n"
        "print(sorted(m for m in ('openai', 'anthropic', 'pydantic', 'anyio') if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.strip() == "[]"


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
    assert top == {"__init__.py", "__main__.py", "_lazy.py"} | {f"{m}.py" for m in PUBLIC_MODULES}
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
    for name in ("asgi.py", "respond.py", "background.py"):
        used = {n.split(".")[0] for n in _imports(PACKAGE / "_serving" / name)}
        assert not {"starlette", "sse_starlette"} & used, name


def test_engine_serving_and_proxy_know_no_dialect_by_name() -> None:
    """Decision P11: above the dialects, code talks to the dialect interface only. Dialects are
    found through the registry; even the proxy's embedded model and upstream client (backends
    that speak each API) leave each API's shape to its dialect (``embedded``,
    ``upstream_headers``)."""
    exempt: set[str] = set()
    for layer in ("_engine", "_serving", "_proxy"):
        for path in _modules(layer):
            if path.name in exempt:
                continue
            found = DIALECT_WORDS.search(_code(path))
            assert found is None, f"{path.relative_to(PACKAGE)} names a dialect: {found.group(0)!r}"


#: Where a loop's own API may be used below the proxy (#34's one runtime seam): the runtime,
#: and the native writer's asyncio path, which it chooses by ``current_runtime().loop``.
LOOP_SPECIFIC = {"_engine/runtime/__init__.py", "_engine/runtime/_asyncio.py"}
LOOP_SPECIFIC |= {"_engine/runtime/_trio.py", "_engine/runtime/_eager311.py", "_serving/respond.py"}


def test_only_the_runtime_knows_which_event_loop_runs() -> None:
    """asyncio's and trio's own APIs (and sniffio, which tells them apart) are used in
    ``_engine/runtime/`` only, plus the native writer's one asyncio path: every other module
    of the engine and the serving layer is written once, on anyio and the runtime."""
    loops = {"asyncio", "trio", "sniffio"}
    for layer in ("_engine", "_store", "_serving"):
        for path in _modules(layer):
            where = path.relative_to(PACKAGE).as_posix()
            used = {n.split(".")[0] for n in _imports(path)} & loops
            if where not in LOOP_SPECIFIC:
                assert not used, f"{where} imports {used}: ask the runtime instead"
    writer = _code(PACKAGE / "_serving" / "respond.py")
    assert "current_runtime().loop" in writer
    assert "running_asyncio_loop" not in writer


def _sdk_imports(path: pathlib.Path) -> tuple[set[str], set[str]]:
    """The openai / anthropic modules ``path`` imports at run time, and those it imports only
    for the type checker (inside ``if TYPE_CHECKING:``)."""
    tree = ast.parse(path.read_text())
    typing_only: set[int] = set()
    for node in ast.walk(tree):
        test = node.test if isinstance(node, ast.If) else None
        if isinstance(test, ast.Name) and test.id == "TYPE_CHECKING":
            typing_only.update(id(inner) for inner in ast.walk(node))
    at_run_time: set[str] = set()
    for_types: set[str] = set()
    for node in ast.walk(tree):
        names = (
            [alias.name for alias in node.names]
            if isinstance(node, ast.Import)
            else [node.module or ""]
            if isinstance(node, ast.ImportFrom)
            else []
        )
        for name in names:
            if name.split(".")[0] in ("openai", "anthropic"):
                (for_types if id(node) in typing_only else at_run_time).add(name)
    return at_run_time, for_types


def test_the_bridges_build_the_sdks_typed_shapes_at_no_run_time_cost() -> None:
    """The request converters annotate what they build with the SDKs' TypedDicts (the type
    checker then checks each content part, tool and message against the SDK), imported for the
    type checker only: a bridge loads no SDK module."""
    typed = set()
    for path in _modules("_dialects/bridges"):
        at_run_time, for_types = _sdk_imports(path)
        where = path.relative_to(PACKAGE).as_posix()
        assert not at_run_time, f"{where} imports {at_run_time} at run time"
        if for_types:
            typed.add(where.removeprefix("_dialects/bridges/"))
    assert typed >= {
        "anthropic_chat/request.py",
        "chat_anthropic/request.py",
        "responses_chat/messages.py",
        "responses_chat/tools.py",
    }


def _module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_the_dialect_layer_imports_without_a_circle() -> None:
    """Within ``_dialects/``, no module imports one that imports it back, type-only imports
    included: each module can be read (and loaded) after the ones it names."""
    modules = {_module_name(path): path for path in _modules("_dialects")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        graph[name] = {
            target
            for imported in _imports(path)
            for target in (imported, imported.rpartition(".")[0])
            if target in modules and target != name and not name.startswith(target + ".")
        }
    done: set[str] = set()

    def visit(name: str, path: tuple[str, ...]) -> None:
        assert name not in path, " -> ".join((*path[path.index(name) :], name))
        if name in done:
            return
        for target in sorted(graph[name]):
            visit(target, (*path, name))
        done.add(name)

    for name in sorted(graph):
        visit(name, ())


def test_the_shared_dialect_modules_import_no_dialect() -> None:
    """The interface and the prepared request every dialect shares name none of them (a
    dialect's own state rides in ``PreparedRequest.state``)."""
    for name in ("base.py", "prepared.py", "requests.py", "names.py", "legacy_settings.py"):
        for imported in _imports(PACKAGE / "_dialects" / name):
            assert not re.match(
                r"aiostream_synth\._dialects\.(chat|responses|anthropic)\b", imported
            ), f"_dialects/{name} imports {imported}"


#: What a measured performance figure looks like in prose: microseconds, percentiles, memory per
#: something, a speed ratio, a before -> after pair.
PERFORMANCE_FIGURE = re.compile(
    r"\d\s?µs|\bp(?:50|99)\b|\d\s?(?:KiB|KB) (?:per|less)|\d(?:\.\d+)?x (?:faster|slower|its)"
    r"|\d\s?->\s?\d"
)


def test_docstrings_carry_no_performance_figures() -> None:
    """Figures go stale where a reader takes them for the API's promise: they live in
    benchmarks/ (COSTS.md for the costs behind the code's choices); docstrings and ``#:``
    attribute docs say why in words and point there."""
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        tree = ast.parse(text)
        documented = [
            ast.get_docstring(node, clean=False) or ""
            for node in ast.walk(tree)
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        ]
        documented += [line for line in text.splitlines() if line.strip().startswith("#:")]
        for doc in documented:
            found = PERFORMANCE_FIGURE.search(doc)
            assert found is None, f"{path.relative_to(PACKAGE)}: {found.group(0)!r} in {doc[:80]!r}"


def test_package_is_typed() -> None:
    """py.typed ships with the package."""
    assert (PACKAGE / "py.typed").exists()


#: Names of the specification documents this project was built from, and their statement ids
#: (B-R13, D8, §1.7): they are not in the repository, so the code must not send a reader there.
SPEC_REFERENCES = re.compile(
    r"\b(?:bridge|anthropic|clients|protocol|decisions)\.md\b|\bB-[A-Z]+\d|\bD\d{1,2}\b"
    r"|(?<!RFC \d{4} )(?<!#\d\d )(?<!\] )§\d"
)
#: The repository (the tests run against an installed package, whose files are elsewhere).
REPOSITORY = pathlib.Path(__file__).resolve().parents[1]
DECISIONS = REPOSITORY / "docs" / "design" / "decisions.md"


def test_the_code_cites_only_documents_in_the_repository() -> None:
    """Decisions are cited as "decision Pn", each a section of docs/design/decisions.md; the
    tests too (an issue's section, ``#32 §1``, and an RFC's are fine)."""
    tests = [
        path
        for path in (REPOSITORY / "tests").rglob("*.py")
        if "node_modules" not in path.parts and path.name != "test_api.py"
    ]
    documents = [*PACKAGE.rglob("*.py"), REPOSITORY / "ARCHITECTURE.md", *tests]
    sections = set(re.findall(r"^## (P\d+)\.", DECISIONS.read_text(encoding="utf-8"), re.M))
    assert sections == {f"P{n}" for n in range(1, 13)}
    for path in documents:
        text = path.read_text(encoding="utf-8")
        found = SPEC_REFERENCES.search(text)
        assert found is None, f"{path.name} cites {found.group(0)!r}, not in the repository"
        for cited in re.findall(r"[Dd]ecisions? (P\d+)", text):
            assert cited in sections, f"{path.name} cites decision {cited}, which is not written"


def test_type_hints_of_public_classes_resolve() -> None:
    """A public class named as living in a public module still has resolvable annotations
    (``typing.get_type_hints`` reads the namespace of the module ``__module__`` names)."""
    for module in PUBLIC_MODULES:
        public = importlib.import_module(f"aiostream_synth.{module}")
        for name in public.__all__:
            value = getattr(public, name)
            if isinstance(value, type):
                typing.get_type_hints(value)


def test_test_modules_import_no_other_test_module() -> None:
    """What tests share lives in tests/support/, so no test depends on another's module."""
    tests = REPOSITORY / "tests"
    for path in sorted(tests.rglob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                module = node.module or ""
                last = module.rpartition(".")[2]
                assert not last.startswith("test_"), f"{path.name} imports {module}"
                if module in ("", "tests"):
                    names = {alias.name for alias in node.names}
                    assert not any(n.startswith("test_") for n in names), path.name
