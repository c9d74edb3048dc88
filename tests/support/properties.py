"""The budget of the property tests: in CI a fixed number of examples, the same ones every run
(derandomized, so a red run is reproducible); set ``AIOSTREAM_SYNTH_PROPERTY_EXAMPLES`` for a
longer, random search, e.g. ``AIOSTREAM_SYNTH_PROPERTY_EXAMPLES=2000 pytest --timeout 0
tests/test_http1_reader.py``."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

__all__ = ["property_settings"]


def property_settings(examples_in_ci: int, share: float = 1.0) -> settings:
    """Hypothesis settings: ``examples_in_ci`` derandomized examples, unless the environment
    asks for a search of its own size (of which a costly property takes its ``share``, never
    fewer than in CI)."""
    asked = int(os.environ.get("AIOSTREAM_SYNTH_PROPERTY_EXAMPLES", "0"))
    return settings(
        max_examples=max(int(asked * share), examples_in_ci) if asked else examples_in_ci,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        derandomize=not asked,
    )
