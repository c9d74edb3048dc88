"""What the installed SDKs have, read from their own types (only whether our rules treat the
installed openai SDK as older comes from our code: ``judges_enumerations``, tested in
``test_sdks.py``).

The suite runs on the newest SDKs and on the lowest we support (nox's ``tests-lowest``). A test
whose input or expectation uses something an older SDK lacks asks here, and either expects
that SDK's own shape or is skipped with the reason naming the version.
"""

from __future__ import annotations

from typing import Annotated, Any, get_args, get_origin

import openai
import pytest
from openai.types.responses import ResponseOutputItem, Tool, WebSearchTool
from openai.types.responses.response_usage import InputTokensDetails

from aiostream_synth._params.sdks import sdk_is_older

OPENAI_VERSION: str = openai.__version__


def _kinds(union: Any) -> frozenset[str]:
    """The ``type`` literals of a union of SDK models (its ``Annotated`` wrapper opened)."""
    if get_origin(union) is Annotated:
        union = get_args(union)[0]
    kinds: set[str] = set()
    for arm in get_args(union):
        field = getattr(arm, "model_fields", {}).get("type")
        if field is not None:
            kinds.update(value for value in get_args(field.annotation) if isinstance(value, str))
    return frozenset(kinds)


#: The Responses output item kinds and tool kinds the installed openai SDK knows.
OUTPUT_ITEM_KINDS = _kinds(ResponseOutputItem)
TOOL_KINDS = _kinds(Tool)
#: Whether the installed SDK's web_search tool has ``external_web_access`` (Codex sends it).
WEB_SEARCH_EXTERNAL_ACCESS = "external_web_access" in WebSearchTool.model_fields
#: Whether the installed SDK's usage has ``input_tokens_details.cache_write_tokens``.
CACHE_WRITE_TOKENS = "cache_write_tokens" in InputTokensDetails.model_fields
#: The input token details every synthesized Responses usage carries, all zero.
ZERO_INPUT_DETAILS: dict[str, int] = {
    "cached_tokens": 0,
    **({"cache_write_tokens": 0} if CACHE_WRITE_TOKENS else {}),
}


def _chat_stream_helper_takes_loose_tools() -> bool:
    """Whether ``chat.completions.stream`` accepts function tools without ``strict`` (the
    releases before 3.x validate them client-side and refuse: "Only `strict` function tools can
    be auto-parsed")."""
    import inspect

    from openai.resources.chat.completions import AsyncCompletions

    return "validate_input_tools" not in inspect.getsource(AsyncCompletions.stream)


CHAT_STREAM_HELPER_TAKES_LOOSE_TOOLS = _chat_stream_helper_takes_loose_tools()


def needs_openai(present: bool, what: str) -> pytest.MarkDecorator:
    """Skip the test where the installed openai SDK lacks ``what``."""
    return pytest.mark.skipif(not present, reason=f"openai {OPENAI_VERSION} has no {what}")


needs_namespace_tools = needs_openai("namespace" in TOOL_KINDS, "namespace tools")


#: Whether the installed openai SDK's enumerations are the ones our rules judge values by (an
#: older SDK's are open: a value it lacks is forwarded, see ``aiostream_synth._params.sdks``).
judges_enumerations = needs_openai(
    not sdk_is_older("openai"), "current enumerations (an older SDK's values are forwarded)"
)


def needs_output_item(kind: str) -> pytest.MarkDecorator:
    """Skip the test where the installed openai SDK has no Responses output item ``kind``."""
    return needs_openai(kind in OUTPUT_ITEM_KINDS, f"{kind!r} output items")
