"""The sealer and scope of a Responses request (see `core/sealing.py`)."""

from __future__ import annotations

from starlette.requests import Request

from sluicegate.core.sealing import Sealer, scope_of, sealer_for
from sluicegate.routes.common import AppState, app_state


def request_scope(request: Request) -> str:
    """The API key the request was authenticated with, hashed (read as `check_auth` reads it);
    without configured keys every request shares one scope."""
    if not app_state(request).settings.api_keys:
        return scope_of(None)
    header = request.headers.get("authorization", "")
    token = header[7:].strip() if header[:7].lower() == "bearer " else request.headers.get("x-api-key", "")
    return scope_of(token)


def sealer(state: AppState) -> Sealer:
    return sealer_for(state.settings.data_dir)
