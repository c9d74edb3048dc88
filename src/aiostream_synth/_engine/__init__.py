"""The engine (anyio; asyncio and trio): keepalive ⟂ backend, cancellation, backpressure.

Knows no dialect by name: it drives a :class:`aiostream_synth._dialects.base.StreamFrames`.
"""
