"""Development entry point: ``python3 -m nox`` runs tests on every Python present, lint and typecheck."""

from __future__ import annotations

import glob
import os
import pathlib
import shutil

import nox

PYTHONS = ["3.11", "3.12", "3.13"]
ROOT = pathlib.Path(__file__).parent
PYPROJECT = nox.project.load_toml(ROOT / "pyproject.toml")

nox.options.sessions = ["tests", "tests-lowest", "ray", "lint", "typecheck", "docs"]
nox.options.reuse_venv = "yes"
# Locally a missing interpreter is skipped; on CI (CI=true) nox turns a missing one into an error.
nox.options.error_on_missing_interpreters = bool(os.environ.get("CI"))


def _expose_pyenv_interpreters() -> None:
    """Put every pyenv-installed CPython 3.11-3.13 on PATH so nox finds ``python3.X``.

    pyenv's shims only answer for the selected version; the interpreters themselves are there.
    """
    root = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
    extra = []
    for version in PYTHONS:
        candidates = sorted(glob.glob(os.path.join(root, "versions", f"{version}.*", "bin")))
        if candidates:
            extra.append(candidates[-1])
    if extra:
        os.environ["PATH"] = os.pathsep.join([*extra, os.environ.get("PATH", "")])


_expose_pyenv_interpreters()


def _group(name: str) -> list[str]:
    return list(nox.project.dependency_groups(PYPROJECT, name))


CLIENTS = ROOT / "tests" / "clients"


def _install_node_clients(session: nox.Session) -> None:
    """openai-node and the Codex CLI for tests/test_clients.py, pinned by package-lock.json."""
    if (CLIENTS / "node_modules" / ".package-lock.json").exists():
        return
    if shutil.which("npm") is None:
        session.warn(
            "npm not found: the Node SDK and Codex CLI tests will be skipped (CI fails instead)"
        )
        return
    with session.chdir(CLIENTS):
        session.run("npm", "ci", "--no-audit", "--no-fund", external=True)
    # Claude Code is a native binary its postinstall links over a placeholder; an npm that holds
    # back install scripts leaves the placeholder, so run that step ourselves then.
    claude = CLIENTS / "node_modules" / "@anthropic-ai" / "claude-code"
    if not (claude / "bin").is_dir():
        return  # npm did not run (``--install-only``, ``--no-install``)
    with (claude / "bin" / "claude.exe").open("rb") as binary:
        native = binary.read(4) in (b"\x7fELF", b"\xcf\xfa\xed\xfe", b"MZ\x90\x00")
    if not native:
        with session.chdir(claude):
            session.run("node", "install.cjs", external=True)


@nox.session(python=PYTHONS)
def tests(session: nox.Session) -> None:
    """Run the test suite (asyncio and trio) against an installed wheel of the package."""
    session.install(".[trio,starlette,proxy]", *_group("test"))
    _install_node_clients(session)
    session.run("pytest", *session.posargs, env={"PYTHONDEVMODE": "1"})


@nox.session(name="tests-lowest", python=PYTHONS[0], venv_backend="uv")
def tests_lowest(session: nox.Session) -> None:
    """The suite on the lowest versions we declare: every direct dependency at its floor
    (uv's ``lowest-direct`` resolution: openai 2.7.2 and anthropic 0.109.2, NeMo Gym's pins,
    among them) on the lowest Python, so no floor is a version nothing ran on."""
    session.install(
        "--resolution",
        "lowest-direct",
        ".[trio,starlette,proxy]",
        *_group("test"),
    )
    _install_node_clients(session)
    session.run("pytest", *session.posargs, env={"PYTHONDEVMODE": "1"})


@nox.session(python="3.12")
def ray(session: nox.Session) -> None:
    """The Ray Serve deployment (deploy/ray/) run by ``serve run`` on a local Ray cluster:
    tests/test_ray_serve.py, which the other sessions skip (Ray is too big for every venv)."""
    session.install(".[proxy]", *_group("test"), *_group("ray"))
    session.run(
        "pytest",
        "tests/test_ray_serve.py",
        *session.posargs,
        env={"AIOSTREAM_SYNTH_REQUIRE_RAY": "1"},
    )


@nox.session(python="3.11")
def lint(session: nox.Session) -> None:
    """ruff, including the async rules."""
    session.install(*_group("lint"))
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session(python="3.11")
def typecheck(session: nox.Session) -> None:
    """mypy --strict over the package, the tests and the benchmarks."""
    session.install(".[trio,starlette,proxy]", *_group("typecheck"))
    session.run("mypy")


SITE = ROOT / "build" / "site"
#: MkDocs 1.6 prints a notice about its successor on every run; the build log stays readable.
_MKDOCS_ENV = {"NO_MKDOCS_2_WARNING": "1"}


@nox.session(python="3.11")
def docs(session: nox.Session) -> None:
    """Build the documentation site with warnings as errors (mkdocs.yml ``strict``), then open
    every page in headless Chromium (tests/site; Debian's ``chromium``, which .ci/run installs)."""
    session.install(".[trio,starlette,proxy]", *_group("docs"))
    session.run("mkdocs", "build", "--strict", "--site-dir", str(SITE), env=_MKDOCS_ENV)
    session.run("pytest", "tests/site", *session.posargs, env={"AIOSTREAM_SYNTH_SITE": str(SITE)})


@nox.session(name="docs-serve", python="3.11", default=False)
def docs_serve(session: nox.Session) -> None:
    """Build the site and serve it at http://127.0.0.1:8008, rebuilt on every edit."""
    session.install(".[trio,starlette,proxy]", *_group("docs"))
    session.run("mkdocs", "serve", "--dev-addr", "127.0.0.1:8008", env=_MKDOCS_ENV)


@nox.session(python="3.11", default=False)
def bench(session: nox.Session) -> None:
    """Benchmarks (not part of the test run): ratios to a floor measured in the same run."""
    session.install(".[starlette,proxy,granian]", *_group("bench"))
    bench = ROOT / "benchmarks"
    session.run("python", str(bench / "bench_synthesis.py"), "--budget", "0.5")
    session.run("python", str(bench / "bench_import.py"), "--runs", "5")
    session.run("python", str(bench / "bench_routing.py"))
    session.run("python", str(bench / "bench_engine.py"), "--quick")
    session.run("python", str(bench / "bench_steady.py"), "--quick")
    session.run("python", str(bench / "bench_admission.py"), "--quick")
    session.run("python", str(bench / "bench_replay.py"), "--replays", "50", "--rounds", "1")
    session.run(
        "python", str(bench / "bench_listing.py"), "--sizes", "100", "1000", "--rounds", "1"
    )
    session.run(
        "python", str(bench / "bench_load.py"), "--quick", "--out", str(bench / "results" / "quick")
    )
