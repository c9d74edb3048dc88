"""An upstream answer that is a failure although its status was 200."""

from __future__ import annotations

from aiostream_synth._wire.errors import BackendError

__all__ = ["upstream_result_failure"]


def upstream_result_failure(message: str) -> BackendError:
    """A 200 answer that is a failure (an error body, no choices, ``finish_reason: "error"``):
    a 502 ``server_error``, which a client may retry."""
    return BackendError(
        502,
        {
            "error": {
                "message": message,
                "type": "server_error",
                "param": None,
                "code": "server_error",
            }
        },
    )
