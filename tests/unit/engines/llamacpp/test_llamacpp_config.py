"""The llamacpp engine's [[models]] keys: validated at startup with the offending key named."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sluicegate.demo.model import make_demo_gguf
from sluicegate.engines.base import ConfigError
from sluicegate.engines.llamacpp import LlamaCppEngine
from sluicegate.engines.lookup import build_model
from sluicegate.parsing import ToolCallFormat


@pytest.fixture(scope="module")
def gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_demo_gguf(tmp_path_factory.mktemp("cfg") / "models" / "acme" / "demo.gguf")


def table(gguf: Path, **extra: Any) -> dict[str, Any]:
    return {"id": "m", "engine": "llamacpp", "path": str(gguf), **extra}


def test_defaults_and_detection(gguf: Path) -> None:
    model = build_model(table(gguf), gguf.parent)
    engine = model.engine
    assert isinstance(engine, LlamaCppEngine)
    # Continuous batching by default: one context with sequences chosen from the KV budget
    # (the tiny demo's 4096-token context fits 4 times), and the instance admits that many.
    assert engine.batching and engine.sequences == 4 and model.max_concurrency == 4
    assert engine.tool_format == ToolCallFormat("hermes") and engine.reasoning is not None
    assert engine.context_length == 4096 and engine.settings.batch_size == 512
    assert len(model.instances) == 1 and not model.loaded


def test_relative_path_parallel_and_overrides(gguf: Path) -> None:
    model = build_model(
        {
            **table(
                gguf,
                parallel=3,
                batching=False,
                tool_call_format="none",
                reasoning="none",
                chat_template="{{ 'x' }}",
            ),
            "path": "demo.gguf",
        },
        gguf.parent,
    )
    assert [i.instance_id for i in model.instances] == ["m", "m:2", "m:3"]  # without batching: instances
    assert model.max_concurrency == 1  # one llama.cpp context runs one sequence
    batched = build_model(table(gguf, parallel=3, max_concurrency=2), gguf.parent)
    assert len(batched.instances) == 1 and batched.engine.default_concurrency() == 3
    assert batched.max_concurrency == 2  # the config's own limit wins
    engine = model.engine
    assert isinstance(engine, LlamaCppEngine)
    assert (
        engine.tool_format is ToolCallFormat.NONE
        and engine.reasoning is None
        and engine.template == "{{ 'x' }}"
    )


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"gpu": 1}, "unknown keys ['gpu']"),
        ({"path": "missing.gguf"}, "no GGUF file"),
        ({"context_length": 0}, "`context_length` must be an integer >= 16"),
        ({"batch_size": "big"}, "`batch_size` must be an integer"),
        ({"parallel": True}, "`parallel` must be an integer"),
        ({"batching": "yes"}, "`batching` must be true or false"),
        ({"stream_interval_ms": -5}, "`stream_interval_ms` must be an integer >= 0"),
        ({"n_gpu_layers": -2}, "`n_gpu_layers` must be an integer >= -1"),
        ({"tool_call_format": "xml"}, "tool_call_format must be one of"),
        ({"reasoning": "maybe"}, "reasoning must be"),
        ({"flash_attention": "yes"}, "`flash_attention` must be true or false"),
        ({"chat_template": "no-such-file.jinja"}, "cannot read chat_template"),
        ({"chat_template": "{% if %}"}, "not a valid Jinja2 template"),
    ],
)
def test_bad_keys(gguf: Path, extra: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=r"^model 'm': ") as caught:
        build_model(table(gguf, **extra), gguf.parent)
    assert message in str(caught.value)


def test_not_a_gguf(tmp_path: Path) -> None:
    bogus = tmp_path / "bogus.gguf"
    bogus.write_bytes(b"not a model")
    with pytest.raises(ConfigError, match="not a readable GGUF"):
        build_model(table(bogus), tmp_path)
