"""A model's default sampling (`[[models]] sampling`, engines/model_defaults.py): what a request
leaves unset is filled at admission (`Model.open`), a request's own value wins, and the table is
checked at startup with the request fields' names and limits."""

from __future__ import annotations

from pathlib import Path

import pytest

from sluicegate.core.request import ChatRequest, Message, SamplingParams
from sluicegate.engines.base import ConfigError
from sluicegate.engines.lookup import build_model
from sluicegate.engines.model_defaults import apply, parse

SCRIPT = "replies: []\n"


def model(tmp_path: Path, sampling: object) -> object:
    (tmp_path / "s.yaml").write_text(SCRIPT)
    table = {"id": "m", "engine": "scripted", "script": "s.yaml", "sampling": sampling}
    return build_model(table, tmp_path)


def test_unset_fields_take_the_defaults_and_set_ones_win(tmp_path: Path) -> None:
    built = model(tmp_path, {"temperature": 0.0, "max_tokens": 64, "top_k": 5, "mirostat": 2})
    request = ChatRequest(model="m", messages=[Message("user", "hi")], sampling=SamplingParams(top_k=9))
    built.open(request)  # type: ignore[attr-defined]
    s = request.sampling
    assert (s.temperature, s.max_tokens, s.top_k, s.mirostat) == (0.0, 64, 9, 2)
    assert s.top_p is None  # not in the defaults: the engine's own


def test_no_table_changes_nothing() -> None:
    s = SamplingParams(temperature=0.5)
    apply(None, s)
    assert s == SamplingParams(temperature=0.5)


@pytest.mark.parametrize(
    ("table", "says"),
    [
        ({"temprature": 0.5}, "unknown `sampling` keys"),
        ({"temperature": 5}, "temperature"),
        ({"max_tokens": 0}, "max_tokens"),
        ("hot", "must be a table"),
    ],
)
def test_a_bad_table_stops_the_server(table: object, says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        parse("m", table)


def test_props_show_the_models_defaults() -> None:
    """llama-server's `GET /props`: `default_generation_settings.params` are what a request
    that sets nothing gets."""
    from sluicegate.dialects.llamaserver.tokens import props_body

    common = {
        "model_id": "m",
        "model_path": None,
        "n_ctx": 512,
        "slots": 1,
        "chat_template": None,
        "vision": False,
        "audio": False,
        "loaded": True,
        "build_info": "x",
    }
    plain = props_body(**common)["default_generation_settings"]["params"]  # type: ignore[arg-type]
    assert (plain["seed"], plain["temperature"], plain["n_predict"]) == (-1, 0.8, -1)
    defaults = parse("m", {"seed": 42, "temperature": 0.0, "max_tokens": 64})
    params = props_body(**common, defaults=defaults)["default_generation_settings"]["params"]  # type: ignore[arg-type]
    assert (params["seed"], params["temperature"], params["n_predict"]) == (42, 0.0, 64)


def test_every_key_is_a_sampling_field() -> None:
    import dataclasses

    from sluicegate.engines.model_defaults import KEYS

    assert {f.name for f in dataclasses.fields(SamplingParams)} >= KEYS
