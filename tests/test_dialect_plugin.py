"""A dialect from outside the package (decision P11): everything a fourth API needs is in this
module — its spec, its options, its stream, the embedded model's hooks — and ``serve --dialect``
serves it: keepalives while the backend works, the answer, a terminal failure after commit and
an HTTP error before it, its options as ``serve`` options.

The dialect, ``plain``: ``POST /v1/plain`` with ``{"model", "prompt", "stream"}``; a stream of
``wait`` events (keepalives), then ``text`` and ``done``, or ``error``. Nothing else in the
repository names it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping, MutableMapping
from pathlib import Path
from typing import Any, Literal

import anyio
import httpx
import pytest

from aiostream_synth._dialects.routes import (
    RouteTable,
    compile_template,
    fill_template,
    request_target,
)
from aiostream_synth._proxy.dialect_plugins import (
    build_dialect_options,
    dialect_option_fields,
    load_dialects,
)
from aiostream_synth.asgi import BackendCall, StreamSettings, SynthesizingApp
from aiostream_synth.dialects import (
    ChatOptions,
    EmbeddedAnswer,
    EmbeddedTool,
    ErrorResponse,
    Outcome,
    RequestTarget,
    register_dialect,
    registered_dialects,
    unregister_dialect,
)
from aiostream_synth.engine import Failure
from aiostream_synth.errors import RequestError
from aiostream_synth.params import PreparedRequest

from .support.asgi_client import OneRequest, post_scope
from .support.cli_server import serve_cli

pytestmark = pytest.mark.timeout(120)


# -- the dialect ------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class PlainOptions:
    wait_text: str = dataclasses.field(
        default="working", metadata={"help": "plain: what each keepalive event says"}
    )
    case: Literal["as-is", "upper"] = dataclasses.field(
        default="as-is", metadata={"help": "plain: the answer's case"}
    )
    done_marker: bool = dataclasses.field(
        default=True, metadata={"help": "plain: end with a done event"}
    )


def _frame(event: str, data: Any) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


@dataclasses.dataclass
class PlainStream:
    options: PlainOptions
    response_id: str | None = None

    def keepalive_frames(self, now: float) -> list[bytes]:
        return [_frame("wait", self.options.wait_text)]

    def result_frames(self, result: Any) -> list[bytes]:
        text = str(result["text"])
        frames = [_frame("text", text.upper() if self.options.case == "upper" else text)]
        return [*frames, _frame("done", {})] if self.options.done_marker else frames

    def failure_frames(self, failure: Failure) -> list[bytes]:
        return [_frame("error", {"status": failure.status_code, "message": failure.message})]

    def error_response(self, failure: Failure) -> ErrorResponse:
        return ErrorResponse(failure.status_code, {"error": failure.message})


@dataclasses.dataclass(frozen=True)
class PlainStreamDialect:
    options: PlainOptions

    def open_stream(self) -> PlainStream:
        return PlainStream(self.options)


class PlainReplies:
    def prompt(self, params: dict[str, Any]) -> tuple[str, str | None]:
        return str(params["prompt"]), None

    def tools(self, params: dict[str, Any]) -> list[EmbeddedTool]:
        return []

    def reply(self, answer: EmbeddedAnswer) -> Any:
        return {"model": answer.model, "text": f"echo: {answer.text}"}


class PlainSpec:
    name = "plain"
    #: The body says it all, or (as Gemini's API does) the URL names the model and the method:
    #: ``/v1/models/m:plainStream?alt=sse`` streams, ``:plainGenerate`` does not.
    paths: tuple[str, ...] = ("/v1/plain", "/v1/models/{model}:{method}")
    upstream_path = "/plain"
    storage = None
    options_type: type[Any] = PlainOptions
    embedded = PlainReplies()
    local_routes: Mapping[str, Any] = {}

    def wants_stream(self, body: Any) -> bool:
        return isinstance(body, dict) and body.get("stream") is True

    def from_target(self, body: dict[str, Any], target: RequestTarget) -> dict[str, Any]:
        if "model" not in target.params:
            return body
        method = target.params["method"]
        if method not in ("plainStream", "plainGenerate"):
            raise RequestError(404, f"no method {method}")
        stream = method == "plainStream" and target.query.get("alt") == "sse"
        return {**body, "model": target.params["model"], "stream": stream}

    def prepare(
        self, body: dict[str, Any], *, options: Any, params_model: Any, bridged: bool = False
    ) -> PreparedRequest:
        for key in ("model", "prompt"):
            if not isinstance(body.get(key), str):
                raise RequestError(400, f"{key} must be a string", param=key)
        params = {"model": body["model"], "prompt": body["prompt"]}
        return PreparedRequest(
            dialect=self.name, stream=self.wants_stream(body), params=params, body=body
        )

    def stream_dialect(self, prepared: PreparedRequest, settings: Any) -> PlainStreamDialect:
        return PlainStreamDialect(settings.dialect_options.get(self.name, PlainOptions()))

    def error_response(
        self,
        status_code: int,
        message: str,
        *,
        code: str | None = None,
        param: str | None = None,
        type: str | None = None,
    ) -> ErrorResponse:
        return ErrorResponse(status_code, {"error": message, "param": param})

    def upstream_headers(
        self, client_headers: Mapping[str, str], api_key: str, *, forward_authorization: bool
    ) -> Mapping[str, str | None]:
        return {}

    def coalesce_key(self, body: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in body.items() if k != "stream"}

    def warm_up(self) -> None:
        pass

    def response_headers(self) -> Mapping[str, str]:
        return {"x-plain": "1"}

    def outcome(self, last: bytes) -> Outcome:
        return "failed" if b"event: error" in last else "completed"


PLAIN = PlainSpec()


# -- through serve ----------------------------------------------------------------------------
def _events(text: str) -> list[tuple[str, Any]]:
    events = []
    for block in text.split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        if "event" in lines:
            events.append((lines["event"], json.loads(lines["data"])))
    return events


@pytest.fixture(scope="module")
def plain_server() -> Iterator[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[1]), *sys.path])}
    env["AIOSTREAM_SYNTH_PLAIN_CASE"] = "upper"  # its options read the environment too
    with serve_cli(
        "--dialect",
        f"{__name__}:PLAIN",
        "--plain-wait-text",
        "hold on",
        "--keepalive-s",
        "0.5",
        env=env,
    ) as (_, url):
        yield url


def _post(url: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{url}/v1/plain", json=body, timeout=60)


def test_serve_streams_a_plugged_in_dialect_with_its_keepalives(plain_server: str) -> None:
    response = _post(plain_server, {"model": "m", "prompt": "hi [delay:2]", "stream": True})
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    assert response.headers["x-plain"] == "1"
    events = _events(response.text)
    waits = [data for name, data in events if name == "wait"]
    assert len(waits) >= 2
    assert set(waits) == {"hold on"}
    assert events[len(waits) :] == [("text", "ECHO: HI"), ("done", {})]  # ..._PLAIN_CASE=upper


def test_a_failure_after_commit_is_the_dialects_terminal_event(plain_server: str) -> None:
    body = {"model": "m", "prompt": "[delay:1.5] [error:503]", "stream": True}
    response = _post(plain_server, body)
    assert response.status_code == 200
    events = _events(response.text)
    assert events[0] == ("wait", "hold on")
    assert events[-1][0] == "error"
    assert events[-1][1]["status"] == 503
    assert [name for name, _ in events].count("error") == 1


def test_a_failure_before_commit_is_an_http_error_in_the_dialects_shape(plain_server: str) -> None:
    response = _post(plain_server, {"model": "m", "prompt": "[error:429]", "stream": True})
    assert response.status_code == 429
    assert "simulated HTTP 429" in response.json()["error"]
    refused = _post(plain_server, {"model": "m", "prompt": 3, "stream": True})
    assert refused.status_code == 400
    assert refused.json() == {"error": "prompt must be a string", "param": "prompt"}


def test_a_non_streaming_request_gets_the_backends_json(plain_server: str) -> None:
    response = _post(plain_server, {"model": "m", "prompt": "plain"})
    assert response.status_code == 200
    assert response.json() == {"model": "m", "text": "echo: plain"}


def test_a_route_template_carries_the_model_and_the_stream_choice(plain_server: str) -> None:
    """The URL names the model and whether to stream (Gemini's shape); the dialect folds them
    into the body it prepares."""
    url = f"{plain_server}/v1/models/gem-1:plainStream?alt=sse"
    streamed = httpx.post(url, json={"prompt": "url [delay:1.5]"}, timeout=60)
    assert streamed.status_code == 200
    events = _events(streamed.text)
    assert events[0] == ("wait", "hold on")
    assert events[-2:] == [("text", "ECHO: URL"), ("done", {})]
    url = f"{plain_server}/v1/models/gem%2D2:plainGenerate"
    whole = httpx.post(url, json={"prompt": "whole"}, timeout=60)
    assert whole.json() == {"model": "gem-2", "text": "echo: whole"}  # the server decodes the path
    unknown = httpx.post(f"{plain_server}/v1/models/gem-1:explode", json={"prompt": "x"})
    assert unknown.status_code == 404
    assert unknown.json() == {"error": "no method explode", "param": None}
    assert httpx.post(f"{plain_server}/v1/models/a/b:plainStream", json={}).status_code == 404


def test_the_metrics_count_the_dialect_by_its_name(plain_server: str) -> None:
    _post(plain_server, {"model": "m", "prompt": "x", "stream": True})
    metrics = httpx.get(f"{plain_server}/metrics").text
    assert 'aiostream_synth_requests_total{dialect="plain",stream="true",outcome="completed"}' in (
        metrics
    )


def test_the_built_in_dialects_are_still_served_beside_it(plain_server: str) -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    response = httpx.post(f"{plain_server}/v1/chat/completions", json=body, timeout=60)
    assert response.status_code == 200
    assert response.text.endswith("data: [DONE]\n\n")


# -- the command line -------------------------------------------------------------------------
def _cli(*argv: str, env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environment = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[1]), *sys.path]),
    }
    return subprocess.run(
        [sys.executable, "-m", "aiostream_synth", *argv],
        capture_output=True,
        text=True,
        env={**environment, **(env or {})},
        timeout=60,
        check=False,
    )


def test_help_lists_the_loaded_dialects_options() -> None:
    done = _cli("serve", "--dialect", f"{__name__}:PLAIN", "--help")
    assert done.returncode == 0, done.stderr
    text = " ".join(done.stdout.split())
    assert "the plain dialect:" in text
    assert "--plain-wait-text PLAIN_WAIT_TEXT plain: what each keepalive event says" in text
    assert "--plain-case {as-is,upper}" in text
    assert "--plain-done-marker, --no-plain-done-marker" in text
    assert "[env AIOSTREAM_SYNTH_PLAIN_CASE]" in text


@pytest.mark.parametrize(
    ("reference", "says"),
    [
        ("no_such_module_here:SPEC", "No module named 'no_such_module_here'"),
        (f"{__name__}:NOPE", "has no attribute 'NOPE'"),
        (f"{__name__}:PlainSpec", "not a dialect spec instance"),
        ("just-a-name", "MODULE:ATTR"),
    ],
)
def test_a_dialect_that_cannot_be_loaded_is_a_usage_error(reference: str, says: str) -> None:
    done = _cli("serve", "--dialect", reference)
    assert done.returncode == 2
    assert "aiostream-synth serve: error:" in done.stderr
    assert says in done.stderr


def test_a_wrong_environment_value_is_a_usage_error_naming_the_variable() -> None:
    env = {"AIOSTREAM_SYNTH_PLAIN_CASE": "lower", "AIOSTREAM_SYNTH_PLAIN_DONE_MARKER": "maybe"}
    done = _cli("serve", "--dialect", f"{__name__}:PLAIN", env=env)
    assert done.returncode == 2
    assert "AIOSTREAM_SYNTH_PLAIN_CASE='lower': expected one of as-is, upper" in done.stderr
    assert "AIOSTREAM_SYNTH_PLAIN_DONE_MARKER='maybe': expected one of" in done.stderr
    helped = _cli("serve", "--dialect", f"{__name__}:PLAIN", "--help", env=env)
    assert helped.returncode == 0  # --help works whatever the environment says
    assert "--plain-case" in helped.stdout


def test_an_upstream_api_no_bridge_reaches_is_a_usage_error() -> None:
    done = _cli("serve", "--dialect", f"{__name__}:PLAIN", "--upstream-api", "plain")
    assert done.returncode == 2
    assert "no bridge serves 'chat' clients from a 'plain' upstream" in done.stderr


def test_a_wrong_option_value_is_a_usage_error_naming_it() -> None:
    done = _cli("serve", "--dialect", f"{__name__}:PLAIN", "--plain-case", "lower")
    assert done.returncode == 2
    assert "--plain-case: invalid choice: 'lower'" in done.stderr


# -- the registry, in this process ------------------------------------------------------------
@pytest.fixture
def plain_registered() -> Iterator[PlainSpec]:
    register_dialect(PLAIN)
    try:
        yield PLAIN
    finally:
        unregister_dialect("plain")


def test_registering_is_idempotent_and_unregistering_forgets(plain_registered: PlainSpec) -> None:
    assert register_dialect(PLAIN) is PLAIN
    assert {spec.name: spec for spec in registered_dialects()}["plain"] is PLAIN
    assert registered_dialects()[-1] is PLAIN
    assert load_dialects([f"{__name__}:PLAIN"]) == [PLAIN]


def test_the_registry_refuses_a_name_or_path_that_is_taken(plain_registered: PlainSpec) -> None:
    with pytest.raises(ValueError, match="already registered"):
        register_dialect(PlainSpec())
    other = PlainSpec()
    other.name = "other"
    with pytest.raises(ValueError, match="cannot answer /v1/plain: dialect 'plain' does"):
        register_dialect(other)
    clash = PlainSpec()
    clash.name, clash.paths = "clash", ("/v1/chat/completions",)
    with pytest.raises(ValueError, match="dialect 'chat' does"):
        register_dialect(clash)
    bad = PlainSpec()
    bad.name = "Bad-Name"
    with pytest.raises(ValueError, match="lower-case"):
        register_dialect(bad)
    with pytest.raises(ValueError, match="built-in"):
        unregister_dialect("chat")


def test_options_are_built_from_the_dataclass(plain_registered: PlainSpec) -> None:
    fields = {
        option.field: option for option in dialect_option_fields(PLAIN.name, PLAIN.options_type)
    }
    assert fields["case"].choices == ("as-is", "upper")
    assert fields["done_marker"].kind is bool
    built = build_dialect_options(registered_dialects(), {"plain": {"case": "upper"}})
    assert built["plain"] == PlainOptions(case="upper")
    assert built["chat"] == ChatOptions()  # every dialect with options gets its defaults
    with pytest.raises(ValueError, match="dialect plain has no option colour"):
        build_dialect_options(registered_dialects(), {"plain": {"colour": "red"}})
    with pytest.raises(ValueError, match="dialect chat has no option x"):
        build_dialect_options(registered_dialects(), {"chat": {"x": 1}})
    with pytest.raises(ValueError, match="a dialect without options"):
        build_dialect_options(registered_dialects(), {"nobody": {"x": 1}})


def test_an_option_no_command_line_can_give_is_refused() -> None:
    @dataclasses.dataclass
    class Listy:
        items: list[str] = dataclasses.field(default_factory=list)

    @dataclasses.dataclass
    class MaybeFlag:
        flag: bool | None = None

    with pytest.raises(TypeError, match="option flag has type"):
        dialect_option_fields("plain", MaybeFlag)
    spec = PlainSpec()
    spec.options_type = Listy
    with pytest.raises(TypeError, match="option items has type"):
        dialect_option_fields(spec.name, spec.options_type)


# -- through the engine, on both loops --------------------------------------------------------
@pytest.mark.anyio
async def test_the_app_streams_it_with_its_options_on_both_loops(
    plain_registered: PlainSpec,
) -> None:
    """Keepalive events until the backend answers (it waits for the second), then the answer
    shaped by the options the settings carry."""
    body = json.dumps({"model": "m", "prompt": "loops", "stream": True}).encode()
    request = OneRequest(body)
    two_waits = anyio.Event()

    async def send(message: MutableMapping[str, Any]) -> None:
        await request.send(message)
        if sum(b"event: wait" in m.get("body", b"") for m in request.bodies) >= 2:
            two_waits.set()

    async def backend(call: BackendCall) -> Any:
        assert (call.dialect, call.params) == ("plain", {"model": "m", "prompt": "loops"})
        await two_waits.wait()
        return {"text": "answer"}

    options = PlainOptions(wait_text="tick", case="upper", done_marker=False)
    app = SynthesizingApp(
        backend, StreamSettings(keepalive_interval=0.01, dialect_options={"plain": options})
    )
    scope = post_scope("/v1/plain")
    with anyio.fail_after(60):
        await app(scope, request.receive, send)
    text = b"".join(m.get("body", b"") for m in request.bodies).decode()
    events = _events(text)
    assert events[:2] == [("wait", "tick"), ("wait", "tick")]
    assert events[-1] == ("text", "ANSWER")
    assert ("done", {}) not in events


def test_settings_refuse_options_of_another_type(plain_registered: PlainSpec) -> None:
    with pytest.raises(ValueError, match=r"dialect_options\['plain'\] must be PlainOptions"):
        StreamSettings(dialect_options={"plain": {"case": "upper"}})
    with pytest.raises(ValueError, match=r"dialect_options\['chat'\] must be ChatOptions"):
        StreamSettings(dialect_options={"chat": PlainOptions()})
    with pytest.raises(ValueError, match="unknown dialect 'nobody'"):
        StreamSettings(dialect_options={"nobody": PlainOptions()})


@pytest.mark.anyio
async def test_the_starlette_routes_serve_it_with_its_templates(
    plain_registered: PlainSpec,
) -> None:
    """The sse-starlette adapter routes the templates too (Starlette's own path parameters)."""
    from starlette.applications import Starlette

    from aiostream_synth.starlette import synthesizing_routes

    async def backend(call: BackendCall) -> Any:
        return {"text": f"{call.params['model']} says {call.params['prompt']}"}

    app = Starlette(routes=synthesizing_routes(backend, StreamSettings(keepalive_interval=5)))
    transport = httpx.ASGITransport(app)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
        streamed = await http.post("/v1/models/m7:plainStream?alt=sse", json={"prompt": "hi"})
        whole = await http.post("/v1/models/m7:plainGenerate", json={"prompt": "hi"})
    assert _events(streamed.text) == [("text", "m7 says hi"), ("done", {})]
    assert whole.json() == {"text": "m7 says hi"}


def test_route_templates_match_one_segment_per_part_literal_paths_first() -> None:
    literal, templated = PlainSpec(), PlainSpec()
    table = RouteTable(
        {"/v1/models/fixed:plainStream": literal, "/v1/models/{model}:{method}": templated}
    )
    assert table.match("/v1/models/fixed:plainStream") is literal
    assert table.match("/v1/models/other:plainStream") is templated
    assert table.match("/v1/models/a/b:plainStream") is None
    assert table.match("/v1/models/:plainStream") is None  # a part matches one character at least
    target = request_target(templated, "/v1/models/gem%2D1:plainStream", b"alt=sse&alt=json&x=")
    assert target.params == {"model": "gem%2D1", "method": "plainStream"}  # the server decodes
    assert target.query == {"alt": "json", "x": ""}  # the last value of a repeated name


@pytest.mark.parametrize(
    "template", ["/v1/{", "/v1/{1x}", "/v1/}x", "/v1/{a-b}", "/v1/{a}}{b}", "/v1/{a}/{a}"]
)
def test_a_malformed_template_is_refused(template: str) -> None:
    with pytest.raises(ValueError, match="a route template's parts are"):
        compile_template(template)
    spec = PlainSpec()
    spec.name, spec.paths = "malformed", (template,)
    with pytest.raises(ValueError, match="a route template's parts are"):
        register_dialect(spec)


# -- the upstream call ------------------------------------------------------------------------
@pytest.mark.anyio
async def test_an_upstream_path_template_takes_its_parts_out_of_the_body() -> None:
    """An upstream that takes the model in its URL (Gemini's API): the part is filled from
    the request, percent-encoded as one segment, and leaves the body sent."""
    from aiostream_synth._proxy.upstream import UpstreamBackend

    spec = PlainSpec()
    spec.name, spec.paths = "plain_gemini", ("/v1/plain_gemini",)
    spec.upstream_path = "/models/{model}:plainGenerate"
    seen: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"text": "ok"})

    register_dialect(spec)
    http = httpx.AsyncClient(transport=httpx.MockTransport(answer))
    backend = UpstreamBackend("http://upstream/v1", api_key="k", http_client=http)
    try:
        params = {"model": "gem/1 pro", "prompt": "hi"}
        call = BackendCall(dialect="plain_gemini", params=params, stream=True)
        assert await backend(call) == {"text": "ok"}
        missing = BackendCall(dialect="plain_gemini", params={"prompt": "hi"}, stream=True)
        with pytest.raises(ValueError, match="needs 'model' in the request"):
            await backend(missing)
    finally:
        unregister_dialect("plain_gemini")
        await backend.aclose()
    assert len(seen) == 1
    assert seen[0].url.raw_path == b"/v1/models/gem%2F1%20pro:plainGenerate"
    assert json.loads(seen[0].content) == {"prompt": "hi"}
    assert params == {"model": "gem/1 pro", "prompt": "hi"}  # the call's own params untouched


def test_fill_template_leaves_a_literal_path_and_its_body_alone() -> None:
    params = {"model": "m", "n": 1}
    assert fill_template("/plain", params) == ("/plain", params)
    assert fill_template("/m/{model}/{n}", {"model": "a", "n": "b", "x": 0}) == ("/m/a/b", {"x": 0})
    with pytest.raises(ValueError, match="needs 'n' in the request, a non-empty string, not 1"):
        fill_template("/m/{model}/{n}", params)


def test_a_malformed_upstream_path_is_refused_at_registration() -> None:
    spec = PlainSpec()
    spec.name, spec.paths, spec.upstream_path = "malformed_up", ("/v1/malformed_up",), "/m/{a"
    with pytest.raises(ValueError, match="a route template's parts are"):
        register_dialect(spec)
    assert "malformed_up" not in {known.name for known in registered_dialects()}
