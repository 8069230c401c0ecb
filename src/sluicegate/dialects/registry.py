"""The one table of dialects: which paths each owns, its error shape, heartbeat and transport.

Routing (unknown routes and wrong methods), auth (the 401 body), error handling and metrics
(`observe` labels) all read this table, so a path's errors and metrics can never disagree
about which API it belongs to. Registering a dialect is its subpackage plus one line here.
"""

from __future__ import annotations

from sluicegate.dialects.anthropic.dialect import SPEC as ANTHROPIC
from sluicegate.dialects.base import DialectSpec
from sluicegate.dialects.chat_completions.dialect import SPEC as CHAT_COMPLETIONS
from sluicegate.dialects.completions.dialect import INFILL_SPEC as INFILL
from sluicegate.dialects.completions.dialect import SPEC as COMPLETIONS
from sluicegate.dialects.llamaserver.dialect import SPEC as LLAMASERVER
from sluicegate.dialects.lmstudio.dialect import SPEC as LMSTUDIO
from sluicegate.dialects.ollama.dialect import SPEC as OLLAMA
from sluicegate.dialects.openai_errors import openai_error
from sluicegate.dialects.responses.dialect import SPEC as RESPONSES

# OpenAI's other endpoints (models, embeddings) and anything not claimed: OpenAI's error shape.
OPENAI = DialectSpec("openai", ("/v1/",), openai_error)
# The page, /health and /metrics: no API of their own (an empty metrics label).
UNCLAIMED = DialectSpec("", ("",), openai_error)

DIALECTS: tuple[DialectSpec, ...] = (
    CHAT_COMPLETIONS,
    RESPONSES,
    ANTHROPIC,
    COMPLETIONS,
    INFILL,
    LLAMASERVER,
    LMSTUDIO,
    OLLAMA,
    OPENAI,
)

# Longest prefix first: `/api/v1/` (LM Studio) is tried before `/api/` (Ollama).
_BY_PREFIX: tuple[tuple[str, DialectSpec], ...] = tuple(
    sorted(((p, spec) for spec in DIALECTS for p in spec.prefixes), key=lambda pair: -len(pair[0]))
)


def dialect_for(path: str) -> DialectSpec:
    """The dialect a path belongs to (`UNCLAIMED` when none claims it)."""
    for prefix, spec in _BY_PREFIX:
        if path.startswith(prefix):
            return spec
    return UNCLAIMED


def dialect_name(path: str) -> str:
    """The metrics label of a path's API ("" for the page, /health and /metrics)."""
    return dialect_for(path).name
