"""The WebSocket `error` envelope: the spec's shape, `error.code` always a string."""

from __future__ import annotations

import json

from sluicegate.core.errors import ErrorInfo, ErrorKind
from sluicegate.dialects.openai_errors import openai_error
from sluicegate.turn.websocket import error_envelope, previous_not_found


def test_previous_response_not_found_is_the_spec_example() -> None:
    info = previous_not_found("resp_abc").info
    envelope = json.loads(error_envelope(info.status, openai_error(info)))
    assert envelope == {
        "type": "error",
        "status": 400,
        "error": {
            "type": "invalid_request_error",
            "code": "previous_response_not_found",
            "message": "Previous response with id 'resp_abc' not found.",
            "param": "previous_response_id",
        },
    }


def test_an_error_without_a_code_gets_its_type_as_code() -> None:
    info = ErrorInfo(ErrorKind.INVALID_REQUEST, "Invalid 'temperature'.", param="temperature")
    envelope = json.loads(error_envelope(400, openai_error(info)))
    assert envelope["error"]["code"] == "invalid_request_error"
    assert envelope["error"]["param"] == "temperature"
