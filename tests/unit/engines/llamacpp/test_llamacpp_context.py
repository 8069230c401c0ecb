"""The default context (trained length, capped by a KV-cache budget) and the overflow policies."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from sluicegate.core.errors import SluicegateError
from sluicegate.core.request import Message, ToolCall
from sluicegate.demo.model import make_demo_gguf
from sluicegate.engines.llamacpp.context import MIB, choose_context
from sluicegate.engines.llamacpp.gguf_info import GGUFInfo, read_gguf_info
from sluicegate.engines.llamacpp.overflow import fit, policy_value


@pytest.fixture(scope="module")
def info(tmp_path_factory: pytest.TempPathFactory) -> GGUFInfo:
    return read_gguf_info(make_demo_gguf(tmp_path_factory.mktemp("ctx") / "demo.gguf"))


def test_kv_bytes_per_token_from_the_header(info: GGUFInfo) -> None:
    # 4 layers x 4 KV heads x (64 + 64) head dims x 2 bytes (f16).
    assert (info.n_layers, info.n_head_kv, info.head_dim_k, info.head_dim_v) == (4, 4, 64, 64)
    assert info.kv_bytes_per_token == 4 * 4 * 128 * 2


def test_trained_context_unless_the_budget_caps_it(info: GGUFInfo) -> None:
    roomy = choose_context(info, None, 1024)
    assert (roomy.length, roomy.source) == (4096, "trained")
    # A Qwen3-4B-like model trained for 40960 tokens: 36 layers, 8 KV heads, head dim 128.
    big = replace(info, context_length=40960, n_layers=36, n_head_kv=8, head_dim_k=128, head_dim_v=128)
    capped = choose_context(big, None, 2048)
    per_token = 36 * 8 * 256 * 2
    assert capped.source == "budget" and capped.length == 2048 * MIB // per_token // 256 * 256
    assert capped.details()["kv_cache_bytes"] <= 2048 * MIB
    assert choose_context(big, None, 1).length == 2048  # never starved below 2048 by the budget
    assert choose_context(big, 1000, 1).length == 1000  # the config wins
    assert "kv_cache_budget_mib" in capped.describe()


def _conversation(turns: int) -> list[Message]:
    messages = [Message("system", "sys")]
    for n in range(turns):
        call = ToolCall(f"c{n}", "look", "{}")
        messages += [
            Message("user", f"q{n}"),
            Message("assistant", "", tool_calls=[call]),
            Message("tool", "result", tool_call_id=call.id),
            Message("assistant", f"a{n}"),
        ]
    return [*messages, Message("user", "last")]


def _count(messages: list[Message]) -> list[int]:
    return [0] * (10 * len(messages))  # ten tokens a message


@pytest.mark.parametrize("policy", ["rolling_window", "truncate_middle"])
def test_policies_drop_whole_turns_and_keep_system_and_last(policy: str) -> None:
    messages = _conversation(5)  # 22 messages: 220 tokens
    fitted = fit(messages, policy_value(policy, "p"), 100, _count)
    assert fitted is not None and len(fitted.tokens) <= 100
    kept = fitted.messages
    assert kept[0].role == "system" and kept[-1].text == "last"
    assert fitted.dropped == len(messages) - len(kept) and fitted.dropped % 4 == 0
    firsts = [m.text for m in kept if m.role == "user"]
    if policy == "rolling_window":
        assert firsts == ["q3", "q4", "last"]  # the newest turns that fit
    else:
        assert firsts == ["q0", "q4", "last"]  # the first turn stays, the middle goes
    for index, message in enumerate(kept):  # no result without its call
        if message.role == "tool":
            assert kept[index - 1].tool_calls


def test_nothing_fits_and_bad_values() -> None:
    assert fit(_conversation(2), "rolling_window", 15, _count) is None
    with pytest.raises(SluicegateError):
        policy_value("sometimes", "context_overflow")


def test_settings_key(tmp_path: Path) -> None:
    from sluicegate.engines.base import ConfigError
    from sluicegate.engines.llamacpp.settings import parse_settings

    model = make_demo_gguf(tmp_path / "m.gguf")
    table = {"id": "m", "engine": "llamacpp", "path": str(model)}
    assert (
        parse_settings({**table, "context_overflow": "truncate_middle"}, tmp_path).context_overflow
        == "truncate_middle"
    )
    assert parse_settings({**table, "kv_cache_budget_mib": 64, "repack": True}, tmp_path).repack
    with pytest.raises(ConfigError, match="context_overflow"):
        parse_settings({**table, "context_overflow": "never"}, tmp_path)
