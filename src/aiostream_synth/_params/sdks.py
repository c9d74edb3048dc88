"""The SDKs installed: whether the optional one is there, and which is older than the releases
our request rules are written against.

The openai SDK is a dependency; the anthropic SDK is the ``[anthropic]`` extra (in ``[proxy]``),
needed only by the Anthropic Messages dialect: :func:`require_sdk` says so in one line where a
Messages request or synthesis would otherwise fail on a bare ``ModuleNotFoundError``.

The strict mirrors (:mod:`.strict`) are built from whatever openai / anthropic SDK is installed,
so an older SDK (NeMo Gym pins ``openai==2.7.2`` and ``anthropic==0.109.2``) gives older field
sets and older enumerations. Two things follow, and :func:`sdk_is_older` decides when:

* a key the old types lack is unknown to the mirror, so it is pruned and reported like any
  unknown key (decision P10): the operator sees it in the log line and the
  ``x-aiostream-synth-dropped`` header;
* an enumeration value the old types lack (``input_image.detail: "original"``) would be a 400
  for a request that is valid today, so the mirrors of an older SDK open their string
  enumerations to any string and forward the value unchecked (``open_values``). Kind keys
  (``type``, ``role``) stay closed: they choose the union arm.

One WARNING per SDK says so, the first time its mirrors are built.
"""

from __future__ import annotations

import importlib
import logging
import re
from functools import cache

__all__ = ["TRACKED", "require_sdk", "sdk_installed", "sdk_is_older", "version_tuple"]

LOG = logging.getLogger("aiostream_synth.params")

#: The SDK releases our request rules and their tests track: the newest enumerations we judge
#: values by. An installed SDK older than this gets open enumerations.
TRACKED: dict[str, tuple[int, int]] = {"openai": (3, 50), "anthropic": (2, 10)}


def version_tuple(version: str) -> tuple[int, ...]:
    """``"2.7.2"`` -> ``(2, 7, 2)``; a pre-release or local suffix ends the numbers."""
    numbers = re.match(r"\d+(?:\.\d+)*", version)
    if numbers is None:
        raise ValueError(f"not a version number: {version!r}")
    return tuple(int(part) for part in numbers.group().split("."))


#: The extra that installs each SDK that is not a dependency of the package itself.
_EXTRAS = {"anthropic": "anthropic"}


@cache
def sdk_installed(sdk: str) -> bool:
    """Whether ``sdk`` can be imported (``"openai"`` always can: it is a dependency)."""
    try:
        importlib.import_module(sdk)
    except ImportError:
        return False
    return True


def require_sdk(sdk: str, needed_by: str) -> None:
    """Raise a ``ModuleNotFoundError`` naming the extra to install when ``sdk`` is missing."""
    if not sdk_installed(sdk):
        raise ModuleNotFoundError(
            f"{needed_by} needs the {sdk} SDK: pip install 'aiostream-synth[{_EXTRAS[sdk]}]'",
            name=sdk,
        )


def _installed_version(sdk: str) -> str:
    if sdk not in TRACKED:
        raise ValueError(f"unknown SDK {sdk!r}: expected one of {sorted(TRACKED)}")
    version: str = importlib.import_module(sdk).__version__
    return version


@cache
def sdk_is_older(sdk: str) -> bool:
    """Whether the installed ``sdk`` (``"openai"`` or ``"anthropic"``) is older than the release
    our rules track; the first answer that is yes logs one WARNING saying what that changes."""
    installed = _installed_version(sdk)
    tracked = TRACKED[sdk]
    older = version_tuple(installed) < tracked
    if older:
        LOG.warning(
            "%s %s is older than %s, the release our request rules track: values of its "
            "enumerations are forwarded unchecked, and keys it does not know are pruned and "
            "reported",
            sdk,
            installed,
            ".".join(map(str, tracked)),
        )
    return older
