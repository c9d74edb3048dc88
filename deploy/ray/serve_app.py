"""aiostream-synth as a Ray Serve application: the proxy's ASGI app as the ingress of N replicas.

Run it (Ray Serve installed beside ``aiostream-synth[proxy]``, a Redis the replicas reach)::

    AIOSTREAM_SYNTH_UPSTREAM=http://model:8001/v1 \\
    AIOSTREAM_SYNTH_STORE=redis://redis:6379/0 \\
    serve run serve_app:app

or with ``serve.yaml`` beside this file (``serve run serve.yaml`` / ``serve deploy serve.yaml``),
which sets the same variables for the replicas. Each replica builds the app from
``AIOSTREAM_SYNTH_*`` exactly as ``aiostream-synth serve`` reads them; with a Redis store the
replicas are one fleet (retries share a generation, resume and cancel reach any replica; see
docs/guides/fleet.md). With the default in-memory store each replica keeps its own responses,
and Ray's router, which has no affinity, sends a resume to any of them: use Redis.
"""

from __future__ import annotations

import os

from ray import serve

from aiostream_synth.proxy import proxy_app

#: Seconds a stopping replica lets its streams finish (Ray's graceful shutdown), then the app's
#: own drain runs in its lifespan's shutdown.
DRAIN_S = float(os.environ.get("AIOSTREAM_SYNTH_DRAIN_TIMEOUT", "30"))


@serve.deployment(
    num_replicas=2,
    # Every stream is an ongoing request for as long as its backend works: Ray's default (5)
    # would queue the sixth waiting client of a replica.
    max_ongoing_requests=10_000,
    ray_actor_options={"num_cpus": 1},
    graceful_shutdown_wait_loop_s=1,
    graceful_shutdown_timeout_s=DRAIN_S + 5,
)
@serve.ingress(proxy_app)  # a builder: called in each replica, so each reads its own environment
class AiostreamSynth:
    """The proxy; its routes are the ASGI app's (``/v1/...``, ``/healthz``, ``/metrics``)."""


app = AiostreamSynth.bind()
