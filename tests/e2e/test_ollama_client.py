"""The official `ollama` Python library, unchanged, against a real server.

One server: the scripted `chat` model (tools, thinking, failures), llama.cpp demo models (a
chat model for structured output, load and unload; an embedding model) and a fake Hugging
Face Hub behind `/api/pull`. Every call is the library's own; what it parses is what Ollama
clients parse.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import ollama
import openai
import pytest
from e2e_support import (
    DEFAULT_REPLY,
    THINK_CONTENT,
    THINK_REASONING,
    Server,
    metric,
    poll,
    run_server,
    scripted,
    write_config,
)
from fake_hub import FakeHub

pytestmark = pytest.mark.e2e

REPO = "acme/Tiny-GGUF"
JS_REPO = "acme/Other-GGUF"
ROOT = Path(__file__).resolve().parents[2]
OLLAMA_JS = Path(os.environ.get("SLUICEGATE_OLLAMA_JS", ROOT / ".tools" / "ollama-js"))
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"type": "string"}},
            "required": ["city"],
        },
    },
}
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 10}, "windy": {"type": "boolean"}},
    "required": ["city", "windy"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def pulled_gguf(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    from sluicegate.demo.model import make_demo_gguf

    path = make_demo_gguf(tmp_path_factory.mktemp("hub") / "tiny-Q5_0.gguf")
    return path.read_bytes()


@pytest.fixture(scope="module")
def hub(pulled_gguf: bytes) -> Iterator[FakeHub]:
    fake = FakeHub()
    fake.add(REPO, {"tiny-Q5_0.gguf": pulled_gguf, "README.md": b"# Tiny\n"})
    fake.add(JS_REPO, {"other-Q5_0.gguf": pulled_gguf})  # pulled by the npm library's test
    with fake.running():
        yield fake


@pytest.fixture(scope="module")
def server(hub: FakeHub, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    from sluicegate.demo.model import make_demo_gguf

    folder = tmp_path_factory.mktemp("ollama")
    gguf = str(make_demo_gguf(folder / "tiny.gguf", ends_replies=False))
    embedder = str(make_demo_gguf(folder / "embed.gguf", embedding=True))
    models = [
        scripted("chat", "chat.yaml"),
        scripted("slow", "slow.yaml"),
        scripted("echo", "echo.yaml"),
        {"id": "tiny", "engine": "llamacpp", "path": gguf, "context_length": 1024},
        {"id": "tiny-embed", "engine": "llamacpp", "path": embedder},
    ]
    config = write_config(folder, {"models_dir": str(folder / "models")}, models)
    with run_server(folder, config, env=hub.env(folder)) as running:
        yield running


@pytest.fixture
def client(server: Server) -> ollama.Client:
    return ollama.Client(host=server.base_url, timeout=120)


def test_root_says_ollama_is_running_to_clients_and_serves_the_page_to_browsers(server: Server) -> None:
    with httpx.Client(base_url=server.base_url) as http:
        assert http.get("/").text == "Ollama is running"
        assert http.head("/").status_code == 200
        page = http.get("/", headers={"Accept": "text/html,application/xhtml+xml"})
        assert page.status_code == 200 and "<html" in page.text.lower()
        version = http.get("/api/version").json()["version"]
        assert [int(part) for part in version.split(".")] >= [0, 12, 0]


def test_list_names_every_model_with_a_tag(client: ollama.Client) -> None:
    listed = {m.model: m for m in client.list().models}
    assert {"chat:latest", "tiny:latest", "tiny-embed:latest"} <= set(listed)
    tiny = listed["tiny:latest"]
    assert tiny.size and tiny.size > 0 and tiny.digest and tiny.modified_at is not None
    assert tiny.details is not None and tiny.details.format == "gguf"
    assert tiny.details.quantization_level == "Q5_0"


def test_show_gives_capabilities_model_info_and_parameters(client: ollama.Client) -> None:
    shown = client.show("tiny:latest")
    assert shown.capabilities is not None and "completion" in shown.capabilities
    assert shown.modelinfo is not None and shown.modelinfo["general.architecture"] == "llama"
    assert shown.parameters is not None and "num_ctx 1024" in shown.parameters
    assert shown.template
    assert client.show("tiny-embed").capabilities == ["embedding"]


def test_chat_not_streamed(client: ollama.Client) -> None:
    response = client.chat(model="chat", messages=[{"role": "user", "content": "Hi"}], stream=False)
    assert response.message.role == "assistant"
    assert response.message.content == DEFAULT_REPLY
    assert response.done and response.done_reason == "stop"
    assert response.eval_count and response.prompt_eval_count and response.total_duration
    assert response.model == "chat"


def test_chat_streamed(client: ollama.Client) -> None:
    parts = list(client.chat(model="chat:latest", messages=[{"role": "user", "content": "Hi"}], stream=True))
    assert len(parts) > 2
    assert "".join(p.message.content or "" for p in parts) == DEFAULT_REPLY
    assert [p.done for p in parts] == [False] * (len(parts) - 1) + [True]
    assert parts[-1].done_reason == "stop" and parts[-1].eval_count
    assert parts[-1].model == "chat:latest"  # the name as the client gave it


def test_think_returns_reasoning_as_thinking(client: ollama.Client) -> None:
    ask = [{"role": "user", "content": "think hard"}]
    thought = client.chat(model="chat", messages=ask, think=True, stream=False)
    assert thought.message.thinking == THINK_REASONING
    assert thought.message.content == THINK_CONTENT
    streamed = list(client.chat(model="chat", messages=ask, think=True, stream=True))
    assert "".join(p.message.thinking or "" for p in streamed) == THINK_REASONING
    assert client.chat(model="chat", messages=ask, think=False, stream=False).message.thinking is None


def test_what_a_model_cannot_do_is_a_400(client: ollama.Client) -> None:
    ask = [{"role": "user", "content": "Hi"}]
    with pytest.raises(ollama.ResponseError) as raised:
        client.chat(model="tiny-embed", messages=ask, tools=[WEATHER_TOOL], stream=False)
    assert raised.value.status_code == 400 and raised.value.error == '"tiny-embed" does not support tools'
    with pytest.raises(ollama.ResponseError) as raised:
        client.chat(model="tiny-embed", messages=ask, think=True, stream=False)
    assert raised.value.status_code == 400 and raised.value.error == '"tiny-embed" does not support thinking'


def test_a_tool_round_trip(client: ollama.Client) -> None:
    messages: list[Any] = [{"role": "user", "content": "What is the weather in Paris?"}]
    first = client.chat(model="chat", messages=messages, tools=[WEATHER_TOOL], stream=False)
    calls = first.message.tool_calls
    assert calls is not None and len(calls) == 1
    assert calls[0].function.name == "get_weather"
    assert calls[0].function.arguments == {"city": "Paris", "unit": "celsius"}  # an object, not text
    messages.append(first.message)
    messages.append({"role": "tool", "content": "sunny, 21 C", "tool_name": "get_weather"})
    answer = client.chat(model="chat", messages=messages, tools=[WEATHER_TOOL], stream=False)
    assert answer.message.content == "It is sunny in Paris."


def test_a_streamed_tool_call_comes_whole_in_one_chunk(client: ollama.Client) -> None:
    parts = list(
        client.chat(
            model="chat",
            messages=[{"role": "user", "content": "weather?"}],
            tools=[WEATHER_TOOL],
            stream=True,
        )
    )
    with_calls = [p for p in parts if p.message.tool_calls]
    assert len(with_calls) == 1
    (call,) = with_calls[0].message.tool_calls or []
    assert call.function.arguments == {"city": "Paris", "unit": "celsius"}


def test_format_with_a_schema_gives_matching_json(client: ollama.Client) -> None:
    response = client.chat(
        model="tiny",
        messages=[{"role": "user", "content": "Weather?"}],
        format=SCHEMA,
        options={"num_predict": 200, "seed": 1, "unknown_option": 3},
        stream=False,
    )
    jsonschema.validate(__import__("json").loads(response.message.content or ""), SCHEMA)


def test_generate(client: ollama.Client) -> None:
    response = client.generate(model="chat", prompt="Hi", system="Be brief.", stream=False)
    assert response.response == DEFAULT_REPLY and response.done
    parts = list(client.generate(model="chat", prompt="Hi", stream=True))
    assert "".join(p.response or "" for p in parts) == DEFAULT_REPLY
    assert parts[-1].done and parts[-1].done_reason == "stop"


def test_embed(client: ollama.Client) -> None:
    many = client.embed(model="tiny-embed", input=["a cat", "a dog"])
    assert len(many.embeddings) == 2 and len(many.embeddings[0]) == 256
    one = client.embeddings(model="tiny-embed", prompt="a cat")
    assert one.embedding == pytest.approx(list(many.embeddings[0]), abs=1e-5)


def test_load_then_unload_with_keep_alive_zero(client: ollama.Client) -> None:
    loaded = client.generate(model="tiny", prompt="")
    assert loaded.done_reason == "load"
    running = {m.model: m for m in client.ps().models}
    assert "tiny:latest" in running and running["tiny:latest"].expires_at is not None
    unloaded = client.chat(model="tiny", messages=[], keep_alive=0)
    assert unloaded.done_reason == "unload"
    assert "tiny:latest" not in {m.model for m in client.ps().models}
    # A turn with keep_alive 0 answers, then unloads the model it loaded.
    answered = client.generate(
        model="tiny", prompt="Hi", keep_alive=0, options={"num_predict": 3}, stream=False
    )
    assert answered.done and answered.eval_count == 3
    assert "tiny:latest" not in {m.model for m in client.ps().models}


def test_pull_reports_progress_and_serves_the_model(client: ollama.Client, server: Server) -> None:
    name = f"hf.co/{REPO}:Q5_0"
    progress = list(client.pull(name, stream=True))
    assert progress[0].status == "pulling manifest"
    assert progress[-1].status == "success"
    sized = [p for p in progress if p.total]
    assert sized and sized[-1].completed == sized[-1].total and (sized[-1].digest or "").startswith("sha256:")
    assert (server.folder / "models" / REPO / "tiny-Q5_0.gguf").exists()
    assert client.show(name).capabilities is not None  # the pulled file is served under its name
    assert client.pull(name, stream=False).status == "success"  # already here


def test_a_pulled_model_is_listed_shown_and_run_by_the_name_it_was_pulled_by(client: ollama.Client) -> None:
    """It was once listed as `acme/tiny-Q5_0:latest`, the file's id: `ollama run` of the name
    a user pulled worked only through a lookup the list did not show (issue 47)."""
    name = f"hf.co/{REPO}:Q5_0"
    assert client.pull(name, stream=False).status == "success"
    listed = {m.model for m in client.list().models}
    assert name in listed and "acme/tiny-Q5_0:latest" not in listed, listed
    assert client.show(name).details is not None
    answered = client.generate(model=name, prompt="Hi", options={"num_predict": 2}, stream=False)
    assert answered.done and answered.model == name
    assert name in {m.model for m in client.ps().models}


def test_an_unknown_model_is_a_404_with_a_string_message(client: ollama.Client) -> None:
    for call in (
        lambda: client.chat(model="nope:7b", messages=[{"role": "user", "content": "Hi"}], stream=False),
        lambda: list(client.chat(model="nope:7b", messages=[{"role": "user", "content": "Hi"}], stream=True)),
        lambda: client.show("nope"),
        lambda: client.generate(model="nope", prompt="Hi", stream=False),
    ):
        with pytest.raises(ollama.ResponseError) as raised:
            call()
        assert raised.value.status_code == 404
        assert isinstance(raised.value.error, str) and "nope" in raised.value.error


def test_an_error_mid_stream_is_one_error_line(client: ollama.Client) -> None:
    with pytest.raises(ollama.ResponseError) as raised:
        list(client.chat(model="chat", messages=[{"role": "user", "content": "fail now"}], stream=True))
    assert raised.value.error == "scripted engine exploded"


def test_one_conversation_served_to_ollama_and_openai_at_once(server: Server) -> None:
    """The same conversation, sent through both clients on one model at the same moment."""
    messages: list[Any] = [{"role": "user", "content": "think about it"}]
    barrier = threading.Barrier(2)
    answers: dict[str, str] = {}

    def ask_ollama() -> None:
        barrier.wait()
        parts = ollama.Client(host=server.base_url).chat(model="chat", messages=messages, stream=True)
        answers["ollama"] = "".join(p.message.content or "" for p in parts)

    def ask_openai() -> None:
        with openai.OpenAI(base_url=server.api_url, api_key="unused", max_retries=0) as sdk:
            barrier.wait()
            stream = sdk.chat.completions.create(model="chat", messages=messages, stream=True)
            answers["openai"] = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)

    threads = [threading.Thread(target=ask_ollama), threading.Thread(target=ask_openai)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert answers == {"ollama": THINK_CONTENT, "openai": THINK_CONTENT}


def test_the_raw_ndjson_shapes(server: Server) -> None:
    """Exactly what an Ollama client reads: one object a line, then the final line."""
    import json

    body = {"model": "chat", "messages": [{"role": "user", "content": "Hi"}]}
    with (
        httpx.Client(base_url=server.base_url) as http,
        http.stream("POST", "/api/chat", json=body) as response,
    ):
        assert response.status_code == 200
        assert response.headers["content-type"] == "application/x-ndjson"
        lines = [json.loads(line) for line in response.iter_lines() if line]
    *chunks, final = lines
    for chunk in chunks:
        assert set(chunk) == {"model", "created_at", "message", "done"}
        assert chunk["done"] is False and chunk["message"]["role"] == "assistant"
        assert set(chunk["message"]) == {"role", "content"}
    assert set(final) == {
        "model",
        "created_at",
        "message",
        "done",
        "done_reason",
        "total_duration",
        "load_duration",
        "prompt_eval_count",
        "prompt_eval_duration",
        "eval_count",
        "eval_duration",
    }
    assert final["done"] is True and final["message"] == {"role": "assistant", "content": ""}
    assert all(isinstance(final[k], int) for k in ("total_duration", "eval_count", "eval_duration"))
    generated = httpx.post(f"{server.base_url}/api/generate", json={"model": "chat", "prompt": "Hi"}).text
    first = json.loads(generated.splitlines()[0])
    assert set(first) == {"model", "created_at", "response", "done"}


def test_bad_input_is_a_400_in_ollama_shape(server: Server) -> None:
    with httpx.Client(base_url=server.base_url) as http:
        for path, body in [
            ("/api/chat", {"model": "chat", "messages": "nope"}),
            ("/api/chat", {"model": "chat", "messages": [{"role": "wizard", "content": "x"}]}),
            ("/api/chat", {"messages": [{"role": "user", "content": "x"}]}),
            ("/api/generate", {"model": "chat", "prompt": "x", "keep_alive": "soon"}),
            ("/api/generate", {"model": "chat", "prompt": "x", "think": "very"}),
            ("/api/show", {}),
            ("/api/pull", {"model": "llama3.2"}),
        ]:
            response = http.post(path, json=body)
            assert response.status_code == 400, (path, body, response.text)
            assert set(response.json()) == {"error"} and isinstance(response.json()["error"], str)
        missing = http.get("/api/nothing-here")
        assert missing.status_code == 404 and set(missing.json()) == {"error"}
        wrong = http.get("/api/chat")
        assert wrong.status_code == 405 and set(wrong.json()) == {"error"}


def test_auth_401_is_in_ollama_shape(tmp_path: Path) -> None:
    config = write_config(tmp_path, {"api_keys": ["sk-test"]}, [scripted("chat", "chat.yaml")])
    with run_server(tmp_path, config) as running:
        with pytest.raises(ollama.ResponseError) as raised:
            ollama.Client(host=running.base_url).list()
        assert raised.value.status_code == 401 and isinstance(raised.value.error, str)
        keyed = ollama.Client(host=running.base_url, headers={"Authorization": "Bearer sk-test"})
        assert keyed.chat(model="chat", messages=[{"role": "user", "content": "Hi"}], stream=False).done
        lms = httpx.get(f"{running.base_url}/api/v1/models")  # LM Studio's paths keep their shape
        assert lms.status_code == 401 and isinstance(lms.json()["error"], dict)


@pytest.mark.skipif(
    shutil.which("node") is None or not (OLLAMA_JS / "node_modules" / "ollama").is_dir(),
    reason="the ollama npm library is not installed (npm install --prefix .tools/ollama-js ollama; .ci/run does it)",
)
def test_the_ollama_npm_library(server: Server) -> None:
    script = Path(__file__).with_name("ollama_js_check.cjs")
    done = subprocess.run(
        ["node", str(script), server.base_url, f"hf.co/{JS_REPO}"],
        env={**os.environ, "OLLAMA_JS": str(OLLAMA_JS)},
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert {"chat:latest", "tiny:latest", "tiny-embed:latest"} <= set(seen["list"])
    assert "completion" in seen["show"]["capabilities"] and seen["show"]["arch"] == "llama"
    assert seen["chat"] == DEFAULT_REPLY
    assert seen["chatStream"] == {
        "text": DEFAULT_REPLY,
        "done": True,
        "reason": "stop",
        "evalCount": 9,
    }  # one a word
    assert seen["toolCall"] == {
        "index": 0,
        "name": "get_weather",
        "arguments": {"city": "Paris", "unit": "celsius"},
    }
    assert seen["toolAnswer"] == "It is sunny in Paris."
    assert seen["thinking"] == THINK_REASONING
    jsonschema.validate(seen["format"], {"type": "object", "required": ["ok"]})
    assert seen["generate"] == DEFAULT_REPLY
    assert seen["embed"] == [256, 256]
    assert seen["pull"] == {"first": "pulling manifest", "last": "success", "sized": True}
    assert seen["load"] == "load" and "tiny:latest" in seen["psLoaded"]
    assert seen["unload"] == "unload" and "tiny:latest" not in seen["psAfter"]
    assert seen["unknown"]["status"] == 404 and "nope:7b" in seen["unknown"]["error"]


def test_metrics_label_the_ollama_routes_ollama(client: ollama.Client, server: Server) -> None:
    client.chat(model="chat", messages=[{"role": "user", "content": "Hi"}], stream=False)
    client.list()
    text = httpx.get(f"{server.base_url}/metrics").text
    assert 'sluicegate_time_to_first_token_seconds_count{dialect="ollama",model="chat"}' in text
    assert 'sluicegate_requests_total{dialect="ollama",status="200"}' in text
    assert 'dialect="lmstudio"' not in text  # nothing here went to an LM Studio path


def test_closing_an_ndjson_stream_cancels_the_engine(server: Server) -> None:
    """Disconnect → cancel, through the NDJSON transport: the generation stops at once."""
    active, cancelled = "sluicegate_generations_active", "sluicegate_generations_cancelled_total"
    before = metric(server.base_url, cancelled, "slow")
    body = {"model": "slow", "messages": [{"role": "user", "content": "go"}]}
    with (
        httpx.Client(base_url=server.base_url, timeout=30) as http,
        http.stream("POST", "/api/chat", json=body) as response,
    ):
        lines = response.iter_lines()
        for _ in range(3):
            assert '"done":false' in next(lines)
        assert metric(server.base_url, active, "slow") == 1
    assert poll(lambda: metric(server.base_url, active, "slow") == 0, timeout=5.0)
    assert poll(lambda: metric(server.base_url, cancelled, "slow") == before + 1, timeout=5.0)


def test_raw_generate_sends_the_prompt_untemplated(client: ollama.Client) -> None:
    """`raw`: the prompt exactly as given (no template, no system); the echo model says what
    reached it. Without `raw` the same prompt arrives as a chat turn with its system message."""
    prompt = "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    raw = client.generate(model="echo", prompt=prompt, system="ignored", raw=True, stream=False)
    assert raw.response == prompt and raw.done
    templated = client.generate(model="echo", prompt="Hi", system="Be brief.", stream=False)
    assert "Be brief." in (templated.response or "") and templated.response != "Hi"
    streamed = "".join(
        p.response or "" for p in client.generate(model="echo", prompt=prompt, raw=True, stream=True)
    )
    assert streamed == prompt


def test_suffix_is_fill_in_the_middle(client: ollama.Client) -> None:
    middle = client.generate(model="echo", prompt="def f(", suffix="    return 1", stream=False)
    # The scripted engine lays FIM out as llama.cpp does for Qwen2.5-Coder, and echoes it.
    assert middle.response == (
        "<|repo_name|>myproject\n<|file_sep|>filename\n<|fim_prefix|>def f(<|fim_suffix|>    return 1<|fim_middle|>"
    )
    with pytest.raises(ollama.ResponseError) as raised:  # the demo GGUF has no FIM tokens
        client.generate(model="tiny", prompt="def f(", suffix="    return 1", stream=False)
    assert raised.value.status_code == 400 and raised.value.error == '"tiny" does not support insert'


def test_raw_generate_on_a_gguf(client: ollama.Client) -> None:
    parts = list(
        client.generate(model="tiny", prompt="Once upon", raw=True, options={"num_predict": 5}, stream=True)
    )
    assert parts[-1].done and parts[-1].eval_count == 5 and parts[-1].done_reason == "length"
    assert "".join(p.response or "" for p in parts)


def test_copy_then_delete_a_name_and_delete_a_pulled_file(client: ollama.Client, server: Server) -> None:
    client.copy("chat", "chat-copy")
    assert "chat-copy:latest" in {m.model for m in client.list().models}
    ask = [{"role": "user", "content": "Hi"}]
    assert client.chat(model="chat-copy:latest", messages=ask, stream=False).message.content == DEFAULT_REPLY
    client.delete("chat-copy")
    assert "chat-copy:latest" not in {m.model for m in client.list().models}
    assert client.chat(model="chat", messages=ask, stream=False).done  # the original stays

    name = f"hf.co/{REPO}:Q5_0"
    assert list(client.pull(name, stream=True))[-1].status == "success"
    client.delete(name)
    assert not (server.folder / "models" / REPO / "tiny-Q5_0.gguf").exists()
    with pytest.raises(ollama.ResponseError) as raised:
        client.show(name)
    assert raised.value.status_code == 404
    with pytest.raises(ollama.ResponseError) as raised:
        client.delete("chat")  # declared in the config, not a downloaded file
    assert raised.value.status_code == 400
