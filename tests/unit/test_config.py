"""config.py load_settings (defaults → TOML file → environment) and registry.build_model."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sluicegate.app.factory import build_registry
from sluicegate.config import DEFAULT_PORT, Settings, load_settings
from sluicegate.engines.base import ConfigError
from sluicegate.engines.lookup import build_model, engine_class
from sluicegate.engines.models import Model
from sluicegate.engines.registry import Registry
from sluicegate.engines.scripted import ScriptedEngine


def write_config(tmp_path: Path, text: str, name: str = "sluicegate.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_defaults_without_file_or_env() -> None:
    settings = load_settings(None, env={})
    assert settings.host == "127.0.0.1"
    assert settings.port == DEFAULT_PORT == 8321
    assert settings.api_keys == []
    assert settings.heartbeat_seconds == 15.0
    assert settings.request_timeout_seconds == 600.0
    assert settings.idle_timeout_seconds == 120.0
    assert settings.max_body_bytes == 16 * 1024 * 1024
    assert settings.max_concurrent_requests == 512
    assert settings.reasoning_field == "reasoning_content"
    assert settings.models == []
    assert settings.data_dir.name == "sluicegate"


def test_file_values(tmp_path: Path) -> None:
    path = write_config(
        tmp_path,
        """
[server]
host = "0.0.0.0"
port = 9000
api_keys = ["k1", "k2"]
heartbeat_seconds = 2.5
request_timeout_seconds = 0
idle_timeout_seconds = 30
max_body_bytes = 1024
max_concurrent_requests = 4
data_dir = "~/sg-data"
log_level = "debug"

[chat_completions]
reasoning_field = "both"
prefill_assistant = true
verbose = true

[[models]]
id = "a"
engine = "scripted"
script = "a.yaml"

[[models]]
id = "b"
engine = "scripted"
""",
    )
    settings = load_settings(path, env={})
    assert settings.host == "0.0.0.0"
    assert settings.port == 9000
    assert settings.api_keys == ["k1", "k2"]
    assert settings.heartbeat_seconds == 2.5
    assert settings.request_timeout_seconds == 0
    assert settings.idle_timeout_seconds == 30
    assert settings.max_body_bytes == 1024
    assert settings.max_concurrent_requests == 4
    assert settings.data_dir == Path("~/sg-data").expanduser()
    assert settings.log_level == "debug"
    assert settings.reasoning_field == "both"
    assert settings.prefill_assistant is True
    assert settings.verbose is True
    assert settings.models == [
        {"id": "a", "engine": "scripted", "script": "a.yaml"},
        {"id": "b", "engine": "scripted"},
    ]
    assert settings.base_dir == tmp_path.resolve()


def test_single_api_key(tmp_path: Path) -> None:
    path = write_config(tmp_path, '[server]\napi_key = "sk-local"\n')
    assert load_settings(path, env={}).api_keys == ["sk-local"]


def test_env_overrides_file(tmp_path: Path) -> None:
    path = write_config(tmp_path, '[server]\nhost = "0.0.0.0"\nport = 9000\napi_key = "from-file"\n')
    env = {
        "SLUICEGATE_HOST": "10.0.0.1",
        "SLUICEGATE_PORT": "9100",
        "SLUICEGATE_API_KEY": "from-env",
        "SLUICEGATE_DATA_DIR": str(tmp_path / "data"),
    }
    settings = load_settings(path, env=env)
    assert settings.host == "10.0.0.1"
    assert settings.port == 9100
    assert settings.api_keys == ["from-env"]
    assert settings.data_dir == tmp_path / "data"


def test_config_path_from_env(tmp_path: Path) -> None:
    path = write_config(tmp_path, "[server]\nport = 9200\n")
    assert load_settings(None, env={"SLUICEGATE_CONFIG": str(path)}).port == 9200
    # an explicit path wins over the env one
    other = write_config(tmp_path, "[server]\nport = 9300\n", name="other.toml")
    assert load_settings(other, env={"SLUICEGATE_CONFIG": str(path)}).port == 9300


def test_env_is_not_read_from_the_process_when_given(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLUICEGATE_PORT", "1234")
    assert load_settings(None, env={}).port == DEFAULT_PORT
    assert load_settings(None).port == 1234


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("[sever]\nport = 1\n", "unknown tables ['sever']"),
        ("[server]\nprot = 1\n", "unknown key [server].prot"),
        ('[server]\nport = "80"\n', "[server].port has the wrong type (str)"),
        ("[server]\nport = true\n", "[server].port has the wrong type (bool)"),
        ("[server]\nport = 80.5\n", "[server].port has the wrong type (float)"),
        ('[server]\nheartbeat_seconds = "15"\n', "[server].heartbeat_seconds has the wrong type"),
        ("[server]\nheartbeat_seconds = -1\n", "[server].heartbeat_seconds must not be negative"),
        ('[server]\napi_keys = "k"\n', "[server].api_keys has the wrong type"),
        ('[server]\napi_keys = ["k", ""]\n', "api_keys must be a list of non-empty strings"),
        ("[server]\napi_keys = [1]\n", "api_keys must be a list of non-empty strings"),
        ('server = "x"\n', "[server] must be a table"),
        (
            '[chat_completions]\nreasoning_field = "thoughts"\n',
            "[chat_completions].reasoning_field must be one of",
        ),
        ('[chat_completions]\nfield = "reasoning"\n', "[chat_completions].field must be one of"),
        (
            "[chat_completions]\nprefill_assistant = 1\n",
            "[chat_completions].prefill_assistant must be one of",
        ),
        ('chat_completions = "x"\n', "[chat_completions] must be a table"),
        ('models = "x"\n', "models must be declared as [[models]] tables"),
        ("models = [1, 2]\n", "models must be declared as [[models]] tables"),
        ("[server\n", "invalid TOML"),
        ("[server]\njit_auto_evict = 1\n", "[server].jit_auto_evict has the wrong type (int)"),
        ("[server]\njit_ttl_seconds = true\n", "[server].jit_ttl_seconds has the wrong type (bool)"),
        ("[server]\njit_ttl_seconds = -5\n", "[server].jit_ttl_seconds must not be negative"),
        ("[server]\nreaper_interval_seconds = 0\n", "reaper_interval_seconds must be positive"),
        ("[server]\nworkers = 0\n", "[server].workers must be at least 1"),
        ("[server]\nmodels_dir = 3\n", "[server].models_dir has the wrong type (int)"),
        ('[server]\ncors_origins = "*"\n', "[server].cors_origins has the wrong type (str)"),
        ('[server]\ncors_origins = ["example.com"]\n', "cors_origins must list origins"),
    ],
)
def test_bad_config_raises_config_error(tmp_path: Path, text: str, fragment: str) -> None:
    path = write_config(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        load_settings(path, env={})
    assert fragment in str(caught.value)


def test_missing_config_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read config"):
        load_settings(tmp_path / "nope.toml", env={})


def test_bad_env_port() -> None:
    with pytest.raises(ConfigError, match="SLUICEGATE_PORT must be a number"):
        load_settings(None, env={"SLUICEGATE_PORT": "eighty"})


# --- registry.build_model -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("table", "fragment"),
    [
        ({"engine": "scripted"}, "needs a string `id`"),
        ({"id": "", "engine": "scripted"}, "needs a string `id`"),
        ({"id": 3, "engine": "scripted"}, "needs a string `id`"),
        ({"id": "m"}, "needs a string `engine`"),
        ({"id": "m", "engine": ["scripted"]}, "needs a string `engine`"),
        (
            {"id": "m", "engine": "gguf-magic"},
            "unknown engine 'gguf-magic'; installed engines: anthropic, llamacpp, openai, piper, scripted, whisper",
        ),
        ({"id": "m", "engine": "scripted", "max_concurrency": -1}, "`max_concurrency` must be"),
        ({"id": "m", "engine": "scripted", "max_concurrency": "2"}, "`max_concurrency` must be"),
        ({"id": "m", "engine": "scripted", "max_queue": -1}, "`max_queue` must be"),
        ({"id": "m", "engine": "scripted", "max_queue": True}, "`max_queue` must be"),
        ({"id": "m", "engine": "scripted", "temperature": 1}, "unknown keys ['temperature']"),
        ({"id": "m", "engine": "scripted", "ttl": -1}, "`ttl` must be a non-negative number"),
        ({"id": "m", "engine": "scripted", "ttl": "1h"}, "`ttl` must be a non-negative number"),
    ],
)
def test_build_model_errors(tmp_path: Path, table: dict[str, Any], fragment: str) -> None:
    with pytest.raises(ConfigError) as caught:
        build_model(table, tmp_path)
    assert fragment in str(caught.value)


def test_build_model_valid(tmp_path: Path) -> None:
    (tmp_path / "s.yaml").write_text("replies:\n  - content: hi\n", encoding="utf-8")
    model = build_model(
        {"id": "m", "engine": "scripted", "script": "s.yaml", "max_concurrency": 2, "max_queue": 0}, tmp_path
    )
    assert isinstance(model, Model)
    assert isinstance(model.engine, ScriptedEngine)
    assert model.engine.path == tmp_path / "s.yaml"
    assert model.id == "m"
    assert model.max_queue == 0
    assert model.loaded is False  # scripted engines load just in time


def test_engine_class_finds_builtin_through_entry_points() -> None:
    assert engine_class("scripted") is ScriptedEngine


def test_duplicate_model_ids(tmp_path: Path) -> None:
    registry = Registry()
    registry.add(build_model({"id": "m", "engine": "scripted"}, tmp_path))
    with pytest.raises(ConfigError, match="model id 'm' is declared twice"):
        registry.add(build_model({"id": "m", "engine": "scripted"}, tmp_path))
    settings = Settings(models=[{"id": "x", "engine": "scripted"}, {"id": "x", "engine": "scripted"}])
    with pytest.raises(ConfigError, match="declared twice"):
        build_registry(settings)


def test_no_models_gives_the_demo_model(tmp_path: Path) -> None:
    registry = build_registry(Settings(data_dir=tmp_path))
    assert list(registry.models) == ["scripted-demo"]


# --- model lifecycle and the models folder ------------------------------------------------------


def test_lifecycle_defaults_and_models_dir_follows_data_dir(tmp_path: Path) -> None:
    settings = load_settings(None, env={})
    assert settings.jit_ttl_seconds == 3600.0
    assert settings.jit_auto_evict is False
    assert settings.reaper_interval_seconds == 5.0
    assert settings.models_dir == settings.data_dir / "models"
    moved = load_settings(None, env={"SLUICEGATE_DATA_DIR": str(tmp_path / "d")})
    assert moved.models_dir == tmp_path / "d" / "models"
    path = write_config(tmp_path, f'[server]\ndata_dir = "{tmp_path / "e"}"\n')
    assert load_settings(path, env={}).models_dir == tmp_path / "e" / "models"


def test_lifecycle_file_values_and_models_dir(tmp_path: Path) -> None:
    path = write_config(
        tmp_path,
        """
[server]
jit_ttl_seconds = 0
jit_auto_evict = true
reaper_interval_seconds = 0.25
models_dir = "weights"

[[models]]
id = "a"
engine = "scripted"
ttl = 90
""",
    )
    settings = load_settings(path, env={})
    assert settings.jit_ttl_seconds == 0
    assert settings.jit_auto_evict is True
    assert settings.reaper_interval_seconds == 0.25
    assert settings.models_dir == tmp_path / "weights"  # relative to the config file
    assert build_registry(settings).models["a"].ttl == 90.0
    env = {"SLUICEGATE_MODELS_DIR": str(tmp_path / "elsewhere")}
    assert load_settings(path, env=env).models_dir == tmp_path / "elsewhere"


def test_a_relative_data_dir_is_relative_to_the_config_file(tmp_path: Path) -> None:
    path = tmp_path / "conf" / "sluicegate.toml"
    path.parent.mkdir()
    path.write_text('[server]\ndata_dir = "state"\n')
    settings = load_settings(path, env={})
    assert settings.data_dir == tmp_path / "conf" / "state"
    assert settings.models_dir == tmp_path / "conf" / "state" / "models"


def test_responses_hosted_tools_map_types_to_providers(tmp_path: Path) -> None:
    path = tmp_path / "hosted.toml"
    path.write_text('[responses.hosted_tools]\nweb_search = "mcp/search"\n', encoding="utf-8")
    assert load_settings(path, env={}).responses_hosted_tools == {"web_search": "mcp/search"}
    assert load_settings(None, env={}).responses_hosted_tools == {}
    path.write_text("[responses.hosted_tools]\nweb_search = 3\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="hosted_tools"):
        load_settings(path, env={})


def test_responses_websocket_settings(tmp_path: Path) -> None:
    defaults = load_settings(None, env={})
    assert (defaults.responses_websocket_max_seconds, defaults.responses_websocket_cached_responses) == (
        3600.0,
        8,
    )
    path = tmp_path / "sluicegate.toml"
    path.write_text(
        "[responses]\nwebsocket_max_seconds = 2.5\nwebsocket_cached_responses = 3\n", encoding="utf-8"
    )
    settings = load_settings(path, env={})
    assert (settings.responses_websocket_max_seconds, settings.responses_websocket_cached_responses) == (
        2.5,
        3,
    )
    for bad in (
        "websocket_max_seconds = 0",
        "websocket_cached_responses = 0",
        "websocket_cached_responses = 1.5",
    ):
        path.write_text(f"[responses]\n{bad}\n", encoding="utf-8")
        with pytest.raises(ConfigError, match=bad.split(" ")[0]):
            load_settings(path, env={})


def test_log_settings(tmp_path: Path) -> None:
    assert (Settings().log_format, Settings().log_prompts) == ("text", False)
    path = write_config(tmp_path, '[server]\nlog_format = "json"\nlog_prompts = true\n')
    settings = load_settings(path, env={})
    assert (settings.log_format, settings.log_prompts) == ("json", True)
    with pytest.raises(ConfigError, match="log_format"):
        load_settings(write_config(tmp_path, '[server]\nlog_format = "xml"\n'), env={})


def test_log_flags_override_the_file(tmp_path: Path) -> None:
    from sluicegate.cli.main import _parser, _settings

    path = write_config(tmp_path, '[server]\nlog_format = "text"\n')
    args = _parser().parse_args(["serve", "--config", str(path), "--log-format", "json", "--log-prompts"])
    settings = _settings(args)
    assert (settings.log_format, settings.log_prompts) == ("json", True)
    assert _settings(_parser().parse_args(["serve", "--config", str(path)])).log_prompts is False


def test_cors_origins(tmp_path: Path) -> None:
    assert load_settings(env={}).cors_origins == []
    path = write_config(tmp_path, '[server]\ncors_origins = ["http://localhost:5173", "*", "localhost"]\n')
    assert load_settings(path, env={}).cors_origins == ["http://localhost:5173", "*", "localhost"]


def test_teams_declare_shared_limits_and_a_budget(tmp_path: Path) -> None:
    path = write_config(
        tmp_path,
        '[teams.red]\nrpm = 600\nconcurrent = 4\nbudget = { cost = 50, period = "day" }\n[teams.blue]\ntpm = 9\n',
    )
    teams = load_settings(path, env={}).teams
    assert teams["red"] == {
        "rpm": 600,
        "tpm": None,
        "concurrent": 4,
        "budget": {"tokens": None, "cost": 50.0, "period": "day"},
    }
    assert teams["blue"]["tpm"] == 9 and teams["blue"]["budget"] is None


@pytest.mark.parametrize(
    "text",
    [
        "[teams.red]\nrpn = 5\n",
        "[teams.red]\nrpm = -1\n",
        "[teams.red]\nrpm = true\n",
        '[teams.red]\nbudget = { period = "week" }\n',
        "[teams]\nred = 5\n",
    ],
)
def test_a_wrong_team_is_a_config_error(tmp_path: Path, text: str) -> None:
    with pytest.raises(ConfigError, match=r"\[teams"):
        load_settings(write_config(tmp_path, text), env={})
