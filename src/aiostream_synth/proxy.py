"""The proxy behind ``aiostream-synth serve``, as an ASGI app for a server or platform of yours.

``aiostream-synth serve`` runs :class:`ProxyApp` on its own server. Where something else
serves ASGI apps (Ray Serve, a Starlette mount, an ASGI server you configure yourself), build
the same app in code:

* :func:`proxy_app` -- from ``serve``'s options and its ``AIOSTREAM_SYNTH_*`` environment, as
  the command line would; it takes no argument at all, so it serves as a builder that a
  platform calls in each replica (``serve.ingress(proxy_app)`` in Ray Serve);
* :class:`ProxyApp` from a :class:`ProxyConfig` (or a backend function of yours);
* :func:`config_from_options` -- the configuration alone.

The app's lifespan opens and closes what it holds (the upstream client, the response store and
its lease) and, at its shutdown, drains the open streams for ``--drain-timeout``, so the server
must run the ASGI lifespan. What ``serve`` adds around the app stays with ``serve``: its signals
(the first starts the drain at once, a second ends every stream), worker processes, the
collector's tuning and the log format.

Every name is imported on first use.
"""

import typing as _typing

from aiostream_synth._lazy import public_module as _public_module

if _typing.TYPE_CHECKING:
    from aiostream_synth._proxy.app import ProxyApp as ProxyApp
    from aiostream_synth._proxy.cli import config_from_options as config_from_options
    from aiostream_synth._proxy.cli import proxy_app as proxy_app
    from aiostream_synth._proxy.config import ProxyConfig as ProxyConfig

_EXPORTS: dict[str, str] = {
    "ProxyApp": "aiostream_synth._proxy.app",
    "ProxyConfig": "aiostream_synth._proxy.config",
    "config_from_options": "aiostream_synth._proxy.cli",
    "proxy_app": "aiostream_synth._proxy.cli",
}

if not _typing.TYPE_CHECKING:  # hidden from type checkers: a misspelt name stays an error for them
    __getattr__, __dir__ = _public_module(__name__, globals(), _EXPORTS)

__all__ = [
    "ProxyApp",
    "ProxyConfig",
    "config_from_options",
    "proxy_app",
]
