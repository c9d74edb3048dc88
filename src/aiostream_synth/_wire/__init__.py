"""The wire: SSE framing, JSON, the exception hierarchy, usage counters, failure classification.

The bottom layer: it imports nothing else of this package (and nothing async).
"""
