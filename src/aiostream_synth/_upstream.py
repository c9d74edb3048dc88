"""The upstream backend: any OpenAI-compatible server that answers non-streaming.

Called through the openai SDK's ``AsyncOpenAI`` at its JSON level (``post(path, body=...)``):
the body is sent exactly as prepared, so provider extension fields on the non-streaming path
and parameters newer than the SDK survive. No retries by default — a client's own retries
must not be multiplied — and long timeouts, since one turn can take minutes.
"""

from __future__ import annotations

from typing import Any

import openai

from ._asgi import BackendCall

__all__ = ["UpstreamBackend"]

_PATHS = {"chat": "/chat/completions", "responses": "/responses"}


class UpstreamBackend:
    """A :data:`CompletionBackend` calling ``base_url`` once per request."""

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        forward_authorization: bool = False,
        connect_timeout: float = 10.0,
        read_timeout: float = 900.0,
        max_retries: int = 0,
        http_client: Any = None,
    ) -> None:
        self.forward_authorization = forward_authorization
        self.client = openai.AsyncOpenAI(
            base_url=base_url,
            api_key=api_key or "unused",
            timeout=openai.Timeout(read_timeout, connect=connect_timeout),
            max_retries=max_retries,
            http_client=http_client,
        )

    def _headers(self, call_headers: Any) -> dict[str, str]:
        if self.forward_authorization and "authorization" in call_headers:
            return {"Authorization": call_headers["authorization"]}
        return {}

    async def __call__(self, call: BackendCall) -> Any:
        return await self.client.post(
            _PATHS[call.dialect],
            cast_to=object,
            body=call.params,
            options={"headers": self._headers(call.headers)},
        )

    async def models(self, headers: Any = None) -> Any:
        """The upstream's ``GET /models`` answer."""
        return await self.client.get(
            "/models", cast_to=object, options={"headers": self._headers(headers or {})}
        )

    async def aclose(self) -> None:
        await self.client.close()
