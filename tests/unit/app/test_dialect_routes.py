"""The app builds each dialect's routes from its registration (`app/dialects.py`), and a chat
route's hooks (`TurnHooks`) run without any route subclassing the runner: the toy dialect
(tests/toy_dialect), installed through its entry point, served in this process."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from scripted_app import scripted_client
from sluicegate.app.dialects import dialect_routes
from sluicegate.core.errors import ConfigError
from sluicegate.dialects import registry
from sluicegate.dialects.base import DialectContext, DialectSpec, Registration
from sluicegate.dialects.registry import DialectTable
from toy_dialect import routes as toy_routes
from toy_dialect.installed import install
from toy_dialect.registration import SPEC, ToyDialect, toy_error


@pytest.fixture
def client(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[TestClient]:
    monkeypatch.syspath_prepend(str(install(tmp_path / "site")))
    monkeypatch.setattr(registry, "_table", None)  # discovered again, with the toy's entry point
    monkeypatch.setattr(toy_routes, "NOTES", [])
    with scripted_client(tmp_path, 'content: "a b c"') as test_client:
        yield test_client


def test_the_toy_dialect_is_served(client: TestClient) -> None:
    assert client.post("/toy/say", json={"model": "m", "say": "hi"}).json() == {"said": "a b c"}
    assert client.get("/toy/ping").json() == {"pong": True}
    refused = client.post("/toy/say", json={"model": "m"})
    assert refused.status_code == 400
    assert refused.json() == {"oops": "`say` must be a non-empty string", "what": "say"}


def test_after_turn_runs_once_a_turn_answered_200(client: TestClient) -> None:
    assert client.post("/toy/say", json={"model": "m", "say": "hi", "note": "one"}).status_code == 200
    with client.stream(
        "POST", "/toy/say", json={"model": "m", "say": "hi", "stream": True, "note": "two"}
    ) as s:
        assert s.status_code == 200 and s.read()
    assert client.post("/toy/say", json={"model": "gone", "say": "hi", "note": "404"}).status_code == 404
    assert client.post("/toy/say", json={"model": "m", "note": "400"}).status_code == 400
    assert toy_routes.NOTES == ["one", "two"]


def test_answer_without_turn(client: TestClient) -> None:
    response = client.post("/toy/say", json={"hush": True, "note": "unseen"})
    assert response.json() == {"hushed": True}
    assert toy_routes.NOTES == []  # answered without a turn: no turn to follow


def _context() -> DialectContext:
    return DialectContext(settings=None, sealer=None, plugin_ids=list, models=dict)  # type: ignore[arg-type]


def _table(**registrations: Registration) -> DialectTable:
    return DialectTable(registrations)


class _SamePath(ToyDialect):
    spec = DialectSpec("toy2", ("/toy2/",), toy_error)  # its own prefix, the toy's chat path


def test_two_dialects_with_one_chat_route_is_a_config_error() -> None:
    one = Registration(specs=(SPEC,), build=lambda _: [ToyDialect()])
    two = Registration(specs=(_SamePath.spec,), build=lambda _: [_SamePath()])
    with pytest.raises(ConfigError, match="another dialect's chat route"):
        dialect_routes(_table(toy=one, toy2=two), _context())


def test_a_dialect_of_a_spec_its_registration_does_not_list_is_a_config_error() -> None:
    unlisted = Registration(specs=(), build=lambda _: [ToyDialect()])
    with pytest.raises(ConfigError, match="spec its registration does not list"):
        dialect_routes(_table(toy=unlisted), _context())


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("routes", ("toy_dialect.routes:HOOKS",), "not a list of routes"),
        ("routes", ("toy_dialect.nowhere:ROUTES",), "cannot be loaded"),
        ("hooks", "toy_dialect.routes:ROUTES", "not a TurnHooks"),
    ],
)
def test_what_a_registration_names_is_checked(field: str, value: Any, message: str) -> None:
    registration = Registration(specs=(SPEC,), build=lambda _: [ToyDialect()], **{field: value})
    with pytest.raises(ConfigError, match=message):
        dialect_routes(_table(toy=registration), _context())
