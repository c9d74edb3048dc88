"""Dialects (decision P11): each one a folder, pure (no I/O, no anyio).

A dialect owns its request preparation, its keepalive, result and failure frames and its
pre-commit error response; the engine, the adapters and the proxy talk to it only through
:mod:`aiostream_synth._dialects.base`. Imports the wire and the params models.
"""
