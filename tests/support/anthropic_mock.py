"""An anthropic SDK client whose transport answers with frames a test sets (``MOCK_FRAMES``): the SDK's own stream parser reads what we synthesize; and the request the Anthropic tests share."""

from __future__ import annotations

from typing import Any, cast

import anthropic

from aiostream_synth._proxy.upstream import sdk_http_module

#: The HTTP library the installed anthropic SDK is built on (httpx2, or httpx before it).


#: The HTTP library the installed anthropic SDK is built on (httpx2, or httpx before it).
sdk_http = sdk_http_module(anthropic.DefaultAsyncHttpxClient)


MOCK_FRAMES: list[bytes] = []


MOCK_SDK = anthropic.Anthropic(
    api_key="k",
    base_url="http://test",
    max_retries=0,
    http_client=cast(
        Any,
        sdk_http.Client(
            transport=sdk_http.MockTransport(
                lambda request: sdk_http.Response(
                    200, headers={"content-type": "text/event-stream"}, content=MOCK_FRAMES[-1]
                )
            )
        ),
    ),
)


REQUEST: dict[str, Any] = {
    "model": "claude-test",
    "max_tokens": 1024,
    "messages": [{"role": "user", "content": "run echo OK"}],
}
