"""The reference pages that are written by hand stay true to what the proxy does.

(The option and metric pages are generated from the code when the site is built; see
docs/hooks.py. The site itself is checked in tests/site/.)"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from aiostream_synth._proxy.app import ProxyApp, ProxyConfig
from tests.support.servers import serve

ROOT = Path(__file__).resolve().parent.parent
#: What the transport adds to any answer, outside the page's scope (its first paragraph).
_TRANSPORT = frozenset({"content-length", "transfer-encoding", "connection", "date", "server"})


@pytest.fixture(scope="module")
def proxy() -> Iterator[str]:
    with serve(ProxyApp(ProxyConfig(keepalive_s=0.2)), "lean") as url:
        yield url


def _listed_headers() -> set[str]:
    page = (ROOT / "docs" / "reference" / "headers.md").read_text(encoding="utf-8")
    return set(re.findall(r"^\| `([a-z0-9-]+)` \|", page, re.MULTILINE))


def test_the_headers_page_lists_every_header_the_proxy_sends(proxy: str) -> None:
    chat = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    responses = {"model": "m", "input": "hi"}
    messages = {"model": "m", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]}
    requests = [
        ("POST", "/v1/chat/completions", {**chat, "stream": True}),
        ("POST", "/v1/chat/completions", chat),
        ("POST", "/v1/responses", {**responses, "stream": True}),
        ("POST", "/v1/responses", {**responses, "background": True}),
        ("POST", "/v1/messages", {**messages, "stream": True}),
        ("POST", "/v1/messages", {**messages, "stream": True, "max_tokens": "many"}),  # a 400
        ("POST", "/v1/messages/count_tokens", messages),
        ("POST", "/v1/chat/completions", {**chat, "stream": True, "tools": [{"type": 1}]}),
        ("PUT", "/v1/chat/completions", None),  # 405 (a GET lists the stored completions)
        ("POST", "/v1/nowhere", chat),  # 404
        ("GET", "/metrics", None),
        ("GET", "/healthz", None),
        ("GET", "/v1/models", None),
    ]
    sent: dict[str, str] = {}
    with httpx.Client(base_url=proxy, timeout=30) as client:
        for method, path, body in requests:
            answer = client.request(method, path, json=body)
            for name in answer.headers:
                sent.setdefault(name.lower(), f"{method} {path} -> {answer.status_code}")
    listed = _listed_headers()
    unlisted = {name: where for name, where in sent.items() if name not in listed | _TRANSPORT}
    assert not unlisted, f"headers the page does not list: {unlisted}"
    # and the page lists nothing made up: each of its headers came back from one request
    assert listed - set(sent) == set(), f"listed but never sent: {listed - set(sent)}"
