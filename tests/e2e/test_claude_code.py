"""The real Claude Code CLI (npm `@anthropic-ai/claude-code`), unchanged but for
`ANTHROPIC_BASE_URL` and a key, against a scripted model: a plain answer, a thinking answer
and a Bash tool round trip whose file really appears. Claude Code runs in a temporary HOME so
no user configuration leaks in. `.ci/run` installs the CLI into `.tools/claude`."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from conftest import StartServer
from e2e_support import Server, scripted

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
KEY = "sk-claude-code"
MODEL = "local"
RUN_TIMEOUT = 180
COUNT_MODEL = "local-count"  # the same GGUF, not loaded until the count_tokens test loads it


def claude_cli() -> str | None:
    """`$SLUICEGATE_CLAUDE`, the copy `.ci/run` installs, or `claude` on PATH."""
    candidates = [os.environ.get("SLUICEGATE_CLAUDE"), str(ROOT / ".tools/claude/node_modules/.bin/claude")]
    for candidate in candidates:
        if candidate and Path(candidate).exists():
            return candidate
    return shutil.which("claude")


CLAUDE = claude_cli()
needs_claude = pytest.mark.skipif(
    CLAUDE is None,
    reason="Claude Code is not installed (npm install --prefix .tools/claude @anthropic-ai/claude-code)",
)


@pytest.fixture(scope="module")
def server(start_server: StartServer) -> Server:
    return start_server({"api_key": KEY}, [scripted(MODEL, "claude_code.yaml")])


def run_claude(
    server: Server, workdir: Path, prompt: str, *extra: str, env_extra: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    assert CLAUDE is not None
    home = workdir.parent / f"{workdir.name}-home"
    home.mkdir(exist_ok=True)
    workdir.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "CLAUDE_"))}
    env |= {
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "ANTHROPIC_BASE_URL": server.base_url,
        "ANTHROPIC_API_KEY": KEY,
        "DISABLE_AUTOUPDATER": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    }
    env |= env_extra or {}
    command = [CLAUDE, "-p", prompt, "--model", MODEL, *extra]
    return subprocess.run(
        command, cwd=workdir, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT, check=False
    )


def result_of(process: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert process.returncode == 0, f"claude failed:\n{process.stdout}\n{process.stderr}"
    result: dict[str, Any] = json.loads(process.stdout)
    assert result["type"] == "result" and result["is_error"] is False, result
    return result


@needs_claude
def test_plain_answer(server: Server, tmp_path: Path) -> None:
    result = result_of(run_claude(server, tmp_path / "plain", "say hello", "--output-format", "json"))
    assert result["result"] == "Plain scripted answer."
    assert result["stop_reason"] == "end_turn"
    assert result["usage"]["input_tokens"] > 1000  # Claude Code's own prompt, tools included
    assert result["usage"]["output_tokens"] == 3


@needs_claude
def test_thinking_answer(server: Server, tmp_path: Path) -> None:
    process = run_claude(
        server,
        tmp_path / "think",
        "think: what is six times seven?",
        "--output-format",
        "stream-json",
        "--verbose",
    )
    assert process.returncode == 0, f"claude failed:\n{process.stdout}\n{process.stderr}"
    messages = [json.loads(line) for line in process.stdout.splitlines() if line.strip()]
    blocks = [block for m in messages if m.get("type") == "assistant" for block in m["message"]["content"]]
    thinking = [b for b in blocks if b["type"] == "thinking"]
    assert thinking and thinking[0]["thinking"] == "Six times seven, carefully."
    assert thinking[0]["signature"]
    assert messages[-1]["type"] == "result" and messages[-1]["result"] == "It is 42."


@needs_claude
def test_bash_tool_round_trip(server: Server, tmp_path: Path) -> None:
    workdir = tmp_path / "bash"
    result = result_of(
        run_claude(
            server, workdir, "please make the file", "--allowedTools", "Bash", "--output-format", "json"
        )
    )
    assert (workdir / "made.txt").read_text() == "made-by-claude\n"
    assert result["result"] == "The file is made."
    assert result["num_turns"] == 2  # the tool call, then the answer after its result


@needs_claude
def test_a_call_cut_off_by_a_failure_never_runs(server: Server, tmp_path: Path) -> None:
    """The model fails inside the Bash call's arguments (after `echo cut > cut.txt",` streamed):
    Claude Code reports the failure and runs nothing, streaming or in its non-streaming retry."""
    workdir = tmp_path / "cut"
    process = run_claude(
        server,
        workdir,
        "cut the call",
        "--allowedTools",
        "Bash",
        "--output-format",
        "json",
        env_extra={"CLAUDE_CODE_MAX_RETRIES": "0"},
    )
    assert not (workdir / "cut.txt").exists()
    result = json.loads(process.stdout)
    assert result["is_error"] is True, result
    assert "the model crashed mid-call" in process.stdout + process.stderr


@pytest.fixture(scope="module")
def llama_server(start_server: StartServer, tmp_path_factory: pytest.TempPathFactory) -> Server:
    from sluicegate.demo.model import make_demo_gguf

    gguf = make_demo_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf")
    model = {"id": MODEL, "engine": "llamacpp", "path": str(gguf), "context_length": 16384, "seed": 7}
    return start_server({"api_key": KEY}, [model, {**model, "id": COUNT_MODEL}])


def first_call_usage(process: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    """The usage of a run's first model call (a run may make more: the random model's nonsense
    can contain a tool call), from Claude Code's stream-json output."""
    assert process.returncode == 0, f"claude failed:\n{process.stdout}\n{process.stderr}"
    messages = [json.loads(line) for line in process.stdout.splitlines() if line.strip()]
    usage: dict[str, Any] = next(m["message"]["usage"] for m in messages if m.get("type") == "assistant")
    return usage


@needs_claude
def test_second_run_reads_the_prompt_from_the_kv_cache(llama_server: Server, tmp_path: Path) -> None:
    """Two sessions in a row on real llama.cpp: the second reports its prompt as cached, so
    nothing per session (the billing-header block) breaks the prefix. Claude Code's prompt is
    trimmed (one tool, a short system prompt) so the tiny demo model reads it in seconds; the
    request still carries Claude Code's own system blocks, tools, reminders and metadata."""
    trimmed = (
        "--tools",
        "Bash",
        "--system-prompt",
        "You are terse.",
        "--output-format",
        "stream-json",
        "--verbose",
    )
    first = first_call_usage(run_claude(llama_server, tmp_path / "one", "say hi", *trimmed))
    second = first_call_usage(run_claude(llama_server, tmp_path / "two", "say hi", *trimmed))
    prompt = first["input_tokens"] + first["cache_read_input_tokens"]
    assert prompt > 1000  # Claude Code's prompt, not a toy one
    assert first["cache_read_input_tokens"] == 0
    assert second["input_tokens"] + second["cache_read_input_tokens"] == prompt
    assert second["cache_read_input_tokens"] >= prompt - 16  # all but the last few tokens


def test_count_tokens_uses_the_llamacpp_tokenizer(llama_server: Server) -> None:
    """count_tokens is the tokenizer's count of the rendered prompt: exactly the prompt tokens a
    generation reports (counted before and after the request that loads the model)."""
    import anthropic

    question = [{"role": "user", "content": "What is the weather in Paris?"}]
    kwargs: Any = {"model": COUNT_MODEL, "messages": question}
    with anthropic.Anthropic(base_url=llama_server.base_url, api_key=KEY, max_retries=0, timeout=120) as sdk:
        before = sdk.messages.count_tokens(**kwargs)
        message = sdk.messages.create(max_tokens=1, **kwargs)
        counted = sdk.messages.count_tokens(**kwargs)
    assert before.input_tokens == counted.input_tokens
    prompt = message.usage.input_tokens + (message.usage.cache_read_input_tokens or 0)
    assert counted.input_tokens == prompt > 10
