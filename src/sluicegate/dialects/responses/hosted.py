"""Hosted tools (`web_search`, `file_search`, `code_interpreter`, …) the client does not run.

A hosted tool the operator maps to a server-side provider (`[responses.hosted_tools]`, e.g.
`web_search = "mcp/search"`) is served through it: that provider's tools are offered, and its
calls run and show as any server-side call does. Any other is left out of what the model sees,
with a warning in the log and the `X-Sluicegate-Ignored-Tools` response header — unless
`tool_choice` names it: forcing a tool that cannot run is a 400 naming it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from sluicegate.core.errors import invalid
from sluicegate.core.headers import header_value
from sluicegate.dialects.responses.request import ResponsesRequest

log = logging.getLogger(__name__)
IGNORED_HEADER = "X-Sluicegate-Ignored-Tools"


@dataclass(slots=True)
class HostedTools:
    plugin_ids: list[str] = field(default_factory=list)  # providers serving mapped hosted tools
    ignored: list[str] = field(default_factory=list)  # hosted tool types left out

    def headers(self) -> dict[str, str]:
        # The types are the client's own text: each percent-encoded where a header needs it.
        names = ",".join(header_value(kind, list_item=True) for kind in self.ignored)
        return {IGNORED_HEADER: names} if self.ignored else {}


def resolve_hosted(req: ResponsesRequest, mapping: dict[str, str], configured: list[str]) -> HostedTools:
    """Which of the request's hosted tools are served (and by which configured provider)."""
    out = HostedTools()
    for kind in req.hosted_tools:
        plugin_id = mapping.get(kind)
        if plugin_id is not None and plugin_id in configured:
            if plugin_id not in out.plugin_ids:
                out.plugin_ids.append(plugin_id)
        elif kind not in out.ignored:
            out.ignored.append(kind)
    choice = req.tool_choice
    if isinstance(choice, dict) and choice.get("type") in out.ignored:
        raise invalid(
            f"Invalid value for 'tool_choice': the hosted tool '{choice['type']}' is not available on "
            "this server (map it to a tool provider in [responses.hosted_tools]).",
            "tool_choice",
        )
    if out.ignored:
        log.warning("responses: hosted tools left out (no provider serves them): %r", out.ignored)
    return out
