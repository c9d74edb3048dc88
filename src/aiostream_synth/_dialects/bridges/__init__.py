"""Bridges: a client dialect served from an upstream that speaks another (decision P11).

Each folder pairs two dialects with pure conversion functions (request -> request, result ->
result) and one :class:`~aiostream_synth._dialects.base.Bridge` object; the registry finds
them by name.
"""
