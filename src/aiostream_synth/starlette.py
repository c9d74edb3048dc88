"""sse-starlette adapter: serve the engine through ``sse_starlette.EventSourceResponse``.

Install with the ``starlette`` extra. Use it as a Starlette route or a FastAPI endpoint::

    from starlette.applications import Starlette
    from aiostream_synth.starlette import synthesizing_routes

    async def backend(call):              # one non-streaming call, complete result back
        return await client.responses.create(**call.params)   # or chat.completions.create

    app = Starlette(routes=synthesizing_routes(backend))

    # FastAPI
    from fastapi import FastAPI
    from aiostream_synth.starlette import synthesizing_endpoint
    api = FastAPI()
    api.add_api_route("/v1/responses", synthesizing_endpoint("responses", backend), methods=["POST"])

Deliberate differences from a plain ``EventSourceResponse``:

* sse-starlette's own ping is off (``ping=0``): the engine's keepalive is the ping, and it is a
  real ``response.in_progress`` event for Responses clients;
* the engine is entered in :meth:`SynthesizedEventSourceResponse.__call__`, around the whole
  response, and its first frame is awaited before any header is sent, so a backend failure
  before the first keepalive tick is a real HTTP error status;
* shutdown never depends on sse-starlette's process-global exit state: the response's
  exit-signal listener waits on nothing, and our :class:`ShutdownSignal` ends the stream with
  its terminal failure event instead.
"""

from aiostream_synth._serving.sse_starlette import (
    SynthesizedEventSourceResponse,
    synthesizing_endpoint,
    synthesizing_routes,
)

__all__ = ["SynthesizedEventSourceResponse", "synthesizing_endpoint", "synthesizing_routes"]

for _value in (SynthesizedEventSourceResponse, synthesizing_endpoint, synthesizing_routes):
    _value.__module__ = __name__  # their public home, as the other public modules do
del _value
