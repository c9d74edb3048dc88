"""Params models: strict mirrors of the SDKs' request types, and the forwarding rules (P10).

Validation with pruning, the removals report, typed access to validated params. Imports only
:mod:`aiostream_synth._wire`.
"""
