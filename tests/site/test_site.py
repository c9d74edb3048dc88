"""The documentation site, as a reader's browser shows it: headless Chromium (Debian's
``chromium`` package, driven by Playwright) opens every page of the built site served on
loopback.

Run by the nox session ``docs`` after ``mkdocs build --strict`` (which already fails on a broken
cross-reference, a dead internal link or an anchor that does not exist), with
``AIOSTREAM_SYNTH_SITE`` naming the built site. Screenshots of the home page and one guide are
written to ``AIOSTREAM_SYNTH_SCREENSHOTS`` when set.
"""

from __future__ import annotations

import functools
import html
import importlib
import os
import re
import shutil
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

import aiostream_synth

SITE = Path(os.environ.get("AIOSTREAM_SYNTH_SITE", "build/site")).resolve()
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
#: What the probe of this workplace found Chromium needs to start as root without a network.
_CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def _require_chromium() -> None:
    if Path(CHROMIUM).exists():
        return
    reason = "Chromium is not installed (apt-get install chromium; .ci/run does)"
    if os.environ.get("CI"):
        pytest.fail(reason)
    pytest.skip(reason)


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def site() -> Iterator[str]:
    """The built site on a loopback port (the search index is fetched, so not from file://)."""
    assert (SITE / "index.html").exists(), f"no built site in {SITE}: run `nox -s docs`"
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=SITE))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    _require_chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=_CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


def _pages() -> list[str]:
    """Every page of the site, as absolute paths ("/" for the home page)."""
    folders = (index.parent.relative_to(SITE).as_posix() for index in SITE.rglob("index.html"))
    return sorted("/" if folder == "." else f"/{folder}/" for folder in folders)


def test_the_sitemap_holds_every_section() -> None:
    pages = _pages()
    assert "/" in pages  # the home page
    for prefix in ("guides/", "reference/", "design/", "changelog/"):
        assert any(page.startswith(f"/{prefix}") for page in pages), prefix
    assert len(pages) >= 18


def test_every_page_renders_without_errors(site: str, browser: Any) -> None:
    """Each page loads, shows its title and an article, fails no request (a missing image,
    script or style) and logs no console error."""
    page = browser.new_page()
    problems: list[str] = []
    page.on(
        "console",
        lambda message: (
            problems.append(f"console {message.type}: {message.text}")
            if message.type == "error"
            else None
        ),
    )
    page.on("pageerror", lambda error: problems.append(f"page error: {error}"))
    page.on("requestfailed", lambda request: problems.append(f"failed: {request.url}"))
    page.on(
        "response",
        lambda response: (
            problems.append(f"{response.status}: {response.url}")
            if response.status >= 400
            else None
        ),
    )
    try:
        for path in _pages():
            problems.clear()
            page.goto(f"{site}{path}", wait_until="networkidle")
            heading = page.locator("article h1").first
            assert heading.inner_text().strip(), f"{path}: no title"
            assert len(page.locator("article").inner_text()) > 200, f"{path}: an empty page"
            images = page.eval_on_selector_all(
                "article img",
                "imgs => imgs.filter(i => !i.complete || i.naturalWidth === 0).length",
            )
            assert images == 0, f"{path}: an image that did not load"
            assert not problems, f"{path}: {problems}"
    finally:
        page.close()


@pytest.mark.parametrize("term", ["apply_patch", "coalesce", "context_length_exceeded"])
def test_search_finds(site: str, browser: Any, term: str) -> None:
    """The site's own search (Material's, run in the page) finds each term."""
    page = browser.new_page()
    try:
        page.goto(f"{site}/", wait_until="networkidle")
        box = page.locator("input.md-search__input")
        box.click()
        box.press_sequentially(term, delay=10)  # typed: the search runs on key events
        results = page.locator(".md-search-result__item")
        results.first.wait_for(timeout=15_000)
        text = page.locator(".md-search-result").inner_text()
        assert term in text.lower(), text[:500]
        assert results.count() >= 1
    finally:
        page.close()


def test_screenshots(site: str, browser: Any) -> None:
    """The home page and the Codex guide, as a reader sees them (for the issue's note)."""
    target = os.environ.get("AIOSTREAM_SYNTH_SCREENSHOTS")
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    try:
        for path, name in (("", "home"), ("guides/codex/", "guide-codex")):
            page.goto(f"{site}/{path}", wait_until="networkidle")
            shot = page.screenshot(full_page=False)
            assert len(shot) > 10_000  # a rendered page, not a blank one
            if target:
                Path(target).mkdir(parents=True, exist_ok=True)
                (Path(target) / f"{name}.png").write_bytes(shot)
    finally:
        page.close()


def _api_entries() -> dict[str, str]:
    """``{dotted name: its docstring's text}`` from the built API reference page."""
    text = (SITE / "reference" / "api" / "index.html").read_text(encoding="utf-8")
    entries: dict[str, str] = {}
    starts = list(re.finditer(r'<div class="doc doc-object doc-\w+">', text))
    for i, start in enumerate(starts):
        chunk = text[start.end() : starts[i + 1].start() if i + 1 < len(starts) else len(text)]
        anchor = re.search(r'id="(aiostream_synth[\w.]*)"', chunk)
        contents = re.search(r'<div class="doc doc-contents[^"]*">(.*)', chunk, re.DOTALL)
        if anchor and contents:
            body = re.sub(r"<[^>]+>", " ", contents.group(1))
            entries.setdefault(anchor.group(1), " ".join(html.unescape(body).split()))
    return entries


#: The public modules: each documents its names on the API page.
PUBLIC_MODULES = ("asgi", "bridges", "engine", "errors", "params", "sse", "starlette")


def test_the_api_reference_documents_every_public_name() -> None:
    """Every name of every public module has an entry with a docstring, under its module; the
    names the package itself exports link to those entries."""
    entries = _api_entries()
    expected = {
        f"aiostream_synth.{module}.{name}"
        for module in PUBLIC_MODULES
        for name in importlib.import_module(f"aiostream_synth.{module}").__all__
    }
    expected |= {f"aiostream_synth.{module}" for module in PUBLIC_MODULES}
    expected.add("aiostream_synth.__version__")
    missing = sorted(expected - set(entries))
    assert not missing, f"public names without an entry: {missing}"
    undocumented = sorted(name for name in expected if not entries[name])
    assert not undocumented, f"public names without a docstring: {undocumented}"
    page = (SITE / "reference" / "api" / "index.html").read_text(encoding="utf-8")
    for name in aiostream_synth.__all__:
        if name != "__version__":
            home = aiostream_synth._EXPORTS[name]
            assert f'href="#{home}.{name}"' in page, name


def test_the_options_page_holds_every_serve_option() -> None:
    from aiostream_synth._proxy import cli

    text = (SITE / "reference" / "cli" / "index.html").read_text(encoding="utf-8")
    for command in ("serve", "demo"):
        parser = next(
            action for action in cli._parser()._actions if action.dest == "command"
        ).choices[command]  # type: ignore[index]
        for action in parser._actions:
            for flag in action.option_strings:
                if flag not in ("-h", "--help"):
                    assert f"<code>{flag}</code>" in text, f"{command} {flag}"


def test_the_generated_tables_are_whole() -> None:
    """The tables the build generates from the code found what they look for."""
    metrics = (SITE / "reference" / "metrics" / "index.html").read_text(encoding="utf-8")
    for series in ("aiostream_synth_open_streams", "aiostream_synth_requests_total"):
        assert f"<code>{series}</code>" in metrics, series
    assert "<code>outcome</code>" in metrics  # the labels, read from a sample
    page = (SITE / "guides" / "troubleshooting" / "index.html").read_text(encoding="utf-8")
    refusals = page.split('id="every-refusal-message"', 1)[1]
    assert refusals.count("<tr>") > 40
    for message in ("Unknown path", "conversation needs server-side state", "Use POST."):
        assert message in html.unescape(refusals), message
