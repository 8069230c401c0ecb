"""Every refusal names a code a client can act on: an invalid MCP `server_url` once came back
with `code: null` (from `/v1/responses` and `/v1/responses/compact` alike)."""

from __future__ import annotations

from typing import Any

import pytest

from sluicegate.core.errors import SluicegateError
from sluicegate.dialects.responses.request import parse_responses_request


@pytest.mark.parametrize(
    ("tool", "code"),
    [
        ({"type": "mcp", "server_label": "x", "server_url": "notaurl"}, "invalid_value"),
        ({"type": "mcp", "server_label": " ", "server_url": "http://h"}, "invalid_value"),
        ({"type": "mcp", "server_label": "x", "connector_id": "c"}, "unsupported_parameter"),
        ({"type": "mcp", "server_label": "x", "server_url": "http://h", "headers": {"a": 1}}, "invalid_type"),
    ],
)
def test_an_invalid_mcp_tool_names_a_code(tool: dict[str, Any], code: str) -> None:
    with pytest.raises(SluicegateError) as raised:
        parse_responses_request({"model": "m", "input": "hi", "tools": [tool]})
    assert raised.value.info.code == code
