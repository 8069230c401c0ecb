"""The admin API for runtime keys (`store/keys.py`), under `/admin/keys`, open only to
`[server] admin_key` (`app/auth.py` checks it before routing):

    POST   /admin/keys               create: the secret is in this answer, and only here
    GET    /admin/keys               list (revoked keys too, marked)
    GET    /admin/keys/{name}        one
    PATCH  /admin/keys/{name}        owner, models, expiry, limits, metadata
    DELETE /admin/keys/{name}        revoke (the record stays, for its usage history)
    GET    /admin/usage              per key, model and day (?key=, ?from=, ?to= ISO dates), and
                                     each key's limits, budget and what is left of it;
                                     and each team's (`[teams.NAME]`): its limits, keys, use

Errors are in OpenAI's shape. Every write is durable before it is answered, and this replica
re-reads the keys at once; the others within a second (`app/keyring.py`).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import replace
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from sluicegate.core.errors import ErrorInfo, ErrorKind, SluicegateError, invalid
from sluicegate.dialects.openai_errors import openai_error
from sluicegate.routes.common import JSONResponse, app_state, dialect_endpoint, read_json
from sluicegate.store.keys import (
    TEAM_PREFIX,
    KeyRequestError,
    KeyStore,
    Team,
    check_name,
    key_fields,
    new_record,
    revoked,
)
from sluicegate.store.usage import UsageRow, Used, budget_state, today
from sluicegate.turn.state import AppState

_KINDS = {404: ErrorKind.NOT_FOUND}  # 400 and 409 (a name taken): an invalid request's shape


def _store(state: AppState) -> KeyStore:
    if state.keys is None:
        raise SluicegateError(ErrorKind.NOT_FOUND, "Runtime keys are off: set [server] admin_key.")
    return state.keys


async def _body(request: Request, state: AppState) -> dict[str, Any]:
    body = await read_json(request, state.settings.max_body_bytes, state.settings.max_json_depth)
    if not isinstance(body, dict):
        raise invalid("The body must be a JSON object.")
    return body


def _refused(exc: KeyRequestError) -> Response:
    info = ErrorInfo(_KINDS.get(exc.status, ErrorKind.INVALID_REQUEST), str(exc), code=exc.code)
    return JSONResponse(openai_error(info), status_code=exc.status)


async def _changed(state: AppState) -> None:
    if state.keys_changed is not None:
        await state.keys_changed()


@dialect_endpoint("admin", openai_error)
async def create_key(request: Request) -> Response:
    state = app_state(request)
    store = _store(state)
    body = await _body(request, state)
    try:
        record, secret = new_record(check_name(body.get("name")), **key_fields(body))
        await store.insert(record)
    except KeyRequestError as exc:
        return _refused(exc)
    await _changed(state)
    return JSONResponse({**record.public(), "key": secret}, status_code=201)


@dialect_endpoint("admin", openai_error)
async def list_keys(request: Request) -> Response:
    records = await _store(app_state(request)).all()
    return JSONResponse({"object": "list", "data": [r.public() for r in records]})


@dialect_endpoint("admin", openai_error)
async def get_key(request: Request) -> Response:
    try:
        record = await _store(app_state(request)).get(request.path_params["name"])
    except KeyRequestError as exc:
        return _refused(exc)
    return JSONResponse(record.public())


@dialect_endpoint("admin", openai_error)
async def update_key(request: Request) -> Response:
    state = app_state(request)
    store = _store(state)
    body = await _body(request, state)
    try:
        record = replace(await store.get(request.path_params["name"]), **key_fields(body))
        await store.replace(record)
    except KeyRequestError as exc:
        return _refused(exc)
    await _changed(state)
    return JSONResponse(record.public())


@dialect_endpoint("admin", openai_error)
async def revoke_key(request: Request) -> Response:
    state = app_state(request)
    store = _store(state)
    try:
        record = revoked(await store.get(request.path_params["name"]))
        await store.replace(record)
    except KeyRequestError as exc:
        return _refused(exc)
    await _changed(state)
    return JSONResponse(record.public())


def _day(request: Request, name: str, default: str) -> str:
    value = request.query_params.get(name, default)
    try:
        return dt.date.fromisoformat(value).isoformat()
    except ValueError:
        raise invalid(f"{name} must be a date (YYYY-MM-DD).", param=name) from None


@dialect_endpoint("admin", openai_error)
async def key_usage(request: Request) -> Response:
    state = app_state(request)
    store = _store(state)
    usage = state.usage
    assert usage is not None  # set beside the key store
    until = _day(request, "to", today())
    since = _day(request, "from", (dt.date.fromisoformat(until) - dt.timedelta(days=30)).isoformat())
    name = request.query_params.get("key")
    everything = await usage.rows(since, until, name)
    rows = [r for r in everything if not r.key.startswith(TEAM_PREFIX)]
    all_records = await store.all()
    records = [r for r in all_records if name is None or r.name == name]
    keys = []
    for record in records:
        budget = None if record.budget is None else await budget_state(usage, record.name, record.budget)
        used = _total(rows, record.name)
        keys.append({**record.public(), "used": used.as_json(), "budget": budget and budget.as_json()})
    teams = []
    if name is None:  # a team's use is its own rows: every key it had, revoked ones too
        team_rows = [r for r in everything if r.key.startswith(TEAM_PREFIX)]
        for team_name, entry in state.settings.teams.items():
            team = Team.from_config(team_name, entry)
            budget = None if team.budget is None else await budget_state(usage, team.counter, team.budget)
            teams.append(
                {
                    **team.public(),
                    "keys": [r.name for r in all_records if r.owner == team_name],
                    "used": _total(team_rows, team.counter).as_json(),
                    "budget": budget and budget.as_json(),
                }
            )
    return JSONResponse(
        {
            "object": "usage",
            "from": since,
            "to": until,
            "data": [r.as_json() for r in rows],
            "keys": keys,
            "teams": teams,
        }
    )


def _total(rows: list[UsageRow], key: str) -> Used:
    total = Used()
    for row in rows:
        if row.key == key:
            total.add(row.used)
    return total


ROUTES = [
    Route("/admin/keys", create_key, methods=["POST"]),
    Route("/admin/keys", list_keys, methods=["GET"]),
    Route("/admin/keys/{name}", get_key, methods=["GET"]),
    Route("/admin/keys/{name}", update_key, methods=["PATCH"]),
    Route("/admin/keys/{name}", revoke_key, methods=["DELETE"]),
    Route("/admin/usage", key_usage, methods=["GET"]),
]
