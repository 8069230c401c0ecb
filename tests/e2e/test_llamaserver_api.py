"""llama-server's own API on a real llama.cpp model (the tiny demo GGUF), as its clients call
it — no `model` in the body: `/completion` (and `/completions`) streamed and not, with the
fields its README documents; `/tokenize` (with pieces), `/detokenize`, `/apply-template`,
`/props`; errors in llama-server's shape."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from conftest import StartServer
from e2e_support import Server, parse_sse, scripted

pytestmark = pytest.mark.e2e

PROMPT = "Once upon a time, in a land far away,"


@pytest.fixture(scope="module")
def server(start_server: StartServer, tmp_path_factory: pytest.TempPathFactory) -> Server:
    from sluicegate.demo.model import make_demo_gguf

    gguf = str(make_demo_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf", ends_replies=False))
    return start_server(
        models=[
            # The first model that completes text serves requests that name none.
            {
                "id": "tiny",
                "engine": "llamacpp",
                "path": gguf,
                "batch_size": 16,
                "context_length": 1024,
                "aliases": ["little", "gpt-*"],
                "tags": ["chat", "small"],
            },
            scripted("chat", "chat.yaml"),  # no tokenizer of its own
        ]
    )


def post(server: Server, path: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(server.base_url + path, json=body, timeout=60.0)


@pytest.mark.parametrize("path", ["/completion", "/completions"])
def test_completion_without_a_model(server: Server, path: str) -> None:
    response = post(server, path, {"prompt": PROMPT, "n_predict": 8, "seed": 7, "n_probs": 2})
    assert response.status_code == 200, response.text
    body = response.json()
    assert isinstance(body["content"], str) and body["content"]
    assert body["stop"] is True and body["stop_type"] == "limit" and body["truncated"] is False
    assert body["model"] == "tiny" and body["id_slot"] == 0 and body["tokens"] == []
    assert body["tokens_predicted"] == 8 and body["tokens_evaluated"] > 5
    assert body["prompt"] == PROMPT
    assert body["generation_settings"]["n_predict"] == 8 and body["generation_settings"]["seed"] == 7
    timings = body["timings"]
    assert (
        timings["predicted_n"] == 8 and timings["prompt_n"] + timings["cache_n"] == body["tokens_evaluated"]
    )
    probs = body["completion_probabilities"]
    assert len(probs) == 8 and all(len(p["top_logprobs"]) == 2 for p in probs)
    assert "".join(p["token"] for p in probs) == body["content"]


def test_completion_streamed(server: Server) -> None:
    body = {"prompt": PROMPT, "n_predict": 6, "stream": True, "seed": 7}
    with httpx.stream("POST", server.base_url + "/completion", json=body, timeout=60.0) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        frames = [f for f in parse_sse(response.read().decode()) if f.data is not None]
    objects = [json.loads(f.data or "") for f in frames]
    tokens, final = objects[:-1], objects[-1]
    assert len(tokens) == 6 and all(o["stop"] is False for o in tokens)
    assert [o["tokens_predicted"] for o in tokens] == [1, 2, 3, 4, 5, 6]
    assert final["stop"] is True and final["content"] == "" and final["stop_type"] == "limit"
    assert final["tokens_predicted"] == 6 and "timings" in final and "generation_settings" in final
    # Every streamed object names its tokens, as llama-server's do.
    assert all(o["tokens"] and all(isinstance(t, int) for t in o["tokens"]) for o in tokens)
    # The same seed, not streamed: the same text.
    whole = post(server, "/completion", {"prompt": PROMPT, "n_predict": 6, "seed": 7}).json()
    assert "".join(o["content"] for o in tokens) == whole["content"]


def test_token_ids_as_the_prompt(server: Server) -> None:
    ids = post(server, "/tokenize", {"content": PROMPT})
    response = post(server, "/completion", {"prompt": ids.json()["tokens"], "n_predict": 3})
    assert response.status_code == 200 and response.json()["tokens_predicted"] == 3


def test_several_prompts_mixed_prompts_and_returned_tokens(server: Server) -> None:
    """An array of prompts is one generation each, answered as an array in order; ids and text
    mixed are one prompt; `return_tokens` gives the output's ids."""
    ids = post(server, "/tokenize", {"content": PROMPT}).json()["tokens"]
    half = len(PROMPT) // 2
    greedy = {"n_predict": 4, "temperature": 0, "return_tokens": True}
    one = post(server, "/completion", {"prompt": PROMPT, **greedy}).json()
    assert len(one["tokens"]) == 4 and all(isinstance(t, int) for t in one["tokens"])
    detok = post(server, "/detokenize", {"tokens": one["tokens"]}).json()["content"]
    assert detok == one["content"]
    response = post(server, "/completion", {"prompt": [ids, PROMPT, {"prompt_string": PROMPT}], **greedy})
    assert response.status_code == 200, response.text
    answers = response.json()
    assert [a["index"] for a in answers] == [0, 1, 2]
    assert {a["content"] for a in answers} == {one["content"]}
    mixed = post(server, "/completion", {"prompt": [*ids[:1], PROMPT[half:]], **greedy})
    assert mixed.status_code == 200 and isinstance(mixed.json()["content"], str)


def test_logit_bias_by_text_bans_it(server: Server) -> None:
    free = post(server, "/completion", {"prompt": PROMPT, "n_predict": 8, "temperature": 0}).json()
    word = free["content"].split()[0]  # what it writes unbiased (greedy: every time)
    ids = post(server, "/tokenize", {"content": word}).json()["tokens"]
    for bias in ([[word, False]], {word: -100}, [[t, False] for t in ids]):
        body = {"prompt": PROMPT, "n_predict": 8, "temperature": 0, "logit_bias": bias}
        answer = post(server, "/completion", body)
        assert answer.status_code == 200, answer.text
        assert word not in answer.json()["content"]


def test_tokenize_and_detokenize(server: Server) -> None:
    plain = post(server, "/tokenize", {"content": PROMPT}).json()["tokens"]
    assert plain and all(isinstance(t, int) for t in plain)
    with_pieces = post(server, "/tokenize", {"content": PROMPT, "with_pieces": True}).json()["tokens"]
    assert [t["id"] for t in with_pieces] == plain
    assert "".join(t["piece"] for t in with_pieces) == PROMPT
    special = post(server, "/tokenize", {"content": PROMPT, "add_special": True}).json()["tokens"]
    assert len(special) >= len(plain)  # BOS, when the vocabulary adds one
    assert post(server, "/detokenize", {"tokens": plain}).json() == {"content": PROMPT}
    assert post(server, "/detokenize", {"tokens": []}).json() == {"content": ""}


def test_apply_template(server: Server) -> None:
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello there"}]
    prompt = post(server, "/apply-template", {"messages": messages}).json()["prompt"]
    assert (
        "Be brief." in prompt
        and "Hello there" in prompt
        and prompt.index("Be brief.") < prompt.index("Hello")
    )
    # llama-server's add_generation_prompt: false after a user turn: the turns alone
    bare = post(server, "/apply-template", {"messages": messages, "add_generation_prompt": False}).json()
    assert prompt.startswith(bare["prompt"]) and len(bare["prompt"]) < len(prompt)
    assert "Hello there" in bare["prompt"]


def test_slots_listed(server: Server) -> None:
    slots = httpx.get(server.base_url + "/slots").json()
    assert slots and all(s["n_ctx"] == 1024 and s["is_processing"] is False for s in slots)
    assert [s["id"] for s in slots] == list(range(len(slots)))
    # Slot actions (test_llamaserver_slots.py) need a model whose sequences are slots.
    saved = httpx.post(server.base_url + "/slots/0?action=save&model=chat", json={"filename": "x.bin"})
    assert saved.status_code == 501 and saved.json()["error"]["type"] == "not_supported_error"


def test_health_as_llama_server_answers_it(server: Server) -> None:
    for path in ("/health", "/v1/health"):
        response = httpx.get(server.base_url + path)
        assert response.status_code == 200 and response.json()["status"] == "ok"


def test_props(server: Server) -> None:
    props = httpx.get(server.base_url + "/props").json()
    assert props["model_path"].endswith("tiny.gguf") and props["model_alias"] == "tiny"
    assert props["default_generation_settings"]["n_ctx"] == 1024 and props["total_slots"] >= 1
    assert props["chat_template"] and props["modalities"] == {"vision": False, "audio": False}


@pytest.mark.parametrize(
    ("path", "body", "status", "fragment"),
    [
        ("/completion", {"n_predict": 3}, 400, "prompt"),
        ("/completion", {"prompt": {"prompt_string": "a", "multimodal_data": ["aGk="]}}, 400, "multimodal"),
        ("/completion", {"prompt": "x", "logit_bias": {"hi": 5}, "model": "chat"}, 400, "token ids only"),
        ("/completion", {"prompt": "x", "n_predict": "3"}, 400, "n_predict"),
        ("/completion", {"prompt": "x", "model": "nope"}, 404, "nope"),
        ("/tokenize", {}, 400, "content"),
        ("/detokenize", {"tokens": [10**9]}, 400, "token ids"),
        ("/detokenize", {"tokens": "x"}, 400, "tokens"),
        ("/tokenize", {"content": "x", "model": "chat"}, 501, "tokenizer"),
    ],
)
def test_errors_in_llama_servers_shape(
    server: Server, path: str, body: dict[str, Any], status: int, fragment: str
) -> None:
    response = post(server, path, body)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["code"] == status and fragment in error["message"] and error["type"]


def test_a_wrong_method_is_its_405(server: Server) -> None:
    response = httpx.get(server.base_url + "/completion")
    assert response.status_code == 405 and response.json()["error"]["code"] == 405


YES_NO = 'root ::= answer\nanswer ::= ("yes" | "no") "."'


def test_a_gbnf_grammar_constrains_a_completion(server: Server) -> None:
    for seed in (1, 2, 3):
        body = {"prompt": PROMPT, "n_predict": 20, "seed": seed, "grammar": YES_NO}
        answer = post(server, "/completion", body).json()
        assert answer["content"] in ("yes.", "no."), answer["content"]
    schema = {"prompt": PROMPT, "n_predict": 20, "json_schema": {"enum": ["red", "green"]}}
    assert post(server, "/completion", schema).json()["content"] in ('"red"', '"green"')


def test_a_gbnf_grammar_in_chat_completions(server: Server) -> None:
    import openai

    with openai.OpenAI(base_url=server.api_url, api_key="unused", max_retries=0) as sdk:
        completion = sdk.chat.completions.create(
            model="tiny",
            messages=[{"role": "user", "content": "Yes or no?"}],
            max_tokens=20,
            extra_body={"grammar": YES_NO},
        )
        assert completion.choices[0].message.content in ("yes.", "no.")
        with pytest.raises(openai.BadRequestError) as caught:
            sdk.chat.completions.create(
                model="tiny",
                messages=[{"role": "user", "content": "x"}],
                extra_body={"grammar": "root ::= ("},
            )
        assert "grammar" in str(caught.value)


def test_a_json_schema_constrains_chat_completions(server: Server) -> None:
    """llama-server's top-level `json_schema`, and its `schema` inside `json_object`."""
    messages = [{"role": "user", "content": "Pick a colour"}]
    for extra in (
        {"json_schema": {"enum": ["red", "green"]}},
        {"response_format": {"type": "json_object", "schema": {"enum": ["red", "green"]}}},
    ):
        for seed in (1, 2):
            body = {"model": "tiny", "messages": messages, "max_tokens": 20, "seed": seed, **extra}
            answer = post(server, "/v1/chat/completions", body).json()
            assert answer["choices"][0]["message"]["content"] in ('"red"', '"green"'), answer


@pytest.mark.parametrize("path", ["/v1/chat/completions/input_tokens", "/chat/completions/input_tokens"])
def test_chat_input_tokens(server: Server, path: str) -> None:
    """The prompt's tokens by the model's tokenizer, as llama-server counts them: more words,
    more tokens; a model without a tokenizer gets an estimate; a bad body is a 400."""
    short = {"messages": [{"role": "user", "content": "What is the best book"}]}
    longer = {"messages": [{"role": "system", "content": "Book " * 20}, *short["messages"]]}
    counted = [post(server, path, {"model": "tiny", **body}) for body in (short, longer)]
    assert [r.status_code for r in counted] == [200, 200]
    assert counted[0].json()["object"] == "response.input_tokens"
    assert 5 < counted[0].json()["input_tokens"] < counted[1].json()["input_tokens"]
    estimated = post(server, path, {"model": "chat", **short})
    assert estimated.status_code == 200 and estimated.json()["input_tokens"] > 0
    bad = post(server, path, {"model": "tiny", "messages": []})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "messages"


def test_a_model_without_adapters_lists_none_and_refuses_scales_in_llama_servers_shape(
    server: Server,
) -> None:
    """llama-server lists `[]` when no adapter is loaded; setting scales on a model that cannot
    take them is its 501, in its own shape (the path is its dialect's, errors and metrics)."""
    listed = httpx.get(f"{server.base_url}/lora-adapters", params={"model": "chat"})
    assert listed.status_code == 200 and listed.json() == []
    refused = httpx.post(
        f"{server.base_url}/lora-adapters", params={"model": "chat"}, json=[{"id": 0, "scale": 1}]
    )
    assert refused.status_code == 501 and refused.json()["error"]["code"] == 501


def test_a_prompt_past_the_context_is_llama_servers_exceed_error(server: Server) -> None:
    response = post(server, "/completion", {"prompt": "Once upon a time " * 400, "n_predict": 4})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "exceed_context_size_error" and error["code"] == 400
    assert error["n_ctx"] == 1024 and error["n_prompt_tokens"] > 1024
    assert "exceeds the available context size" in error["message"]


def test_several_prompts_streamed(server: Server) -> None:
    """Streamed, each object names its prompt's `index`; each prompt ends with its own final
    object, and the stream just ends (no `[DONE]`, as llama-server's)."""
    body = {"prompt": [PROMPT, "Far away"], "n_predict": 3, "stream": True, "temperature": 0}
    with httpx.stream("POST", server.base_url + "/completion", json=body, timeout=60.0) as response:
        assert response.status_code == 200
        frames = [f for f in parse_sse(response.read().decode()) if f.data is not None]
    assert all(f.data != "[DONE]" for f in frames)
    objects = [json.loads(f.data or "") for f in frames]
    for index in (0, 1):
        mine = [o for o in objects if o["index"] == index]
        assert [o["stop"] for o in mine] == [False, False, False, True]
        assert mine[-1]["tokens_predicted"] == 3


def test_return_progress_in_chat_completions(server: Server) -> None:
    """llama-server's `prompt_progress` chunks, counted by the engine: the first says what the
    cache held, `processed` grows to `total`; the same prompt again starts from its cache."""
    long_prompt = "This is a test. " * 20  # longer than one batch (16 tokens)

    def reports() -> list[dict[str, int]]:
        body = {
            "model": "tiny",
            "messages": [{"role": "user", "content": long_prompt}],
            "max_tokens": 2,
            "stream": True,
            "return_progress": True,
        }
        with httpx.stream(
            "POST", server.base_url + "/v1/chat/completions", json=body, timeout=60.0
        ) as response:
            assert response.status_code == 200
            frames = [f.data for f in parse_sse(response.read().decode()) if f.data not in (None, "[DONE]")]
        return [json.loads(d or "")["prompt_progress"] for d in frames if "prompt_progress" in (d or "")]

    first = reports()
    assert len(first) > 2 and first[0]["processed"] == first[0]["cache"]
    assert all(r["total"] == first[0]["total"] > 16 and r["cache"] == first[0]["cache"] for r in first)
    assert [r["processed"] for r in first] == sorted({r["processed"] for r in first})
    assert first[-1]["processed"] == first[-1]["total"]
    again = reports()
    assert again[0]["cache"] > 0 and again[-1]["processed"] == again[-1]["total"]


@pytest.fixture(scope="module")
def llama_server_defaults(start_server: StartServer, tmp_path_factory: pytest.TempPathFactory) -> Server:
    """A server with llama-server's defaults: prefill, `--verbose` and `--seed 42`."""
    from sluicegate.demo.model import make_demo_gguf

    gguf = str(make_demo_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf"))
    return start_server(
        models=[
            {
                "id": "tiny",
                "engine": "llamacpp",
                "path": gguf,
                "context_length": 512,
                "sampling": {"seed": 42},
            }
        ],
        tables={"chat_completions": {"prefill_assistant": True, "verbose": True}},
    )


def test_prefill_assistant_setting(llama_server_defaults: Server) -> None:
    """`[chat_completions] prefill_assistant` (llama-server's default): a last assistant message
    is continued, so its prompt is shorter than the one that closes it and opens a new turn,
    which a request still gets by saying `continue_final_message: false`."""
    server = llama_server_defaults
    messages = [{"role": "user", "content": "Name a colour"}, {"role": "assistant", "content": "The colour"}]
    path = "/v1/chat/completions/input_tokens"
    prefilled = post(server, path, {"model": "tiny", "messages": messages}).json()["input_tokens"]
    new_turn = {"model": "tiny", "messages": messages, "continue_final_message": False}
    assert prefilled < post(server, path, new_turn).json()["input_tokens"]
    answer = post(server, "/v1/chat/completions", {"model": "tiny", "messages": messages, "max_tokens": 2})
    assert answer.status_code == 200 and answer.json()["usage"]["prompt_tokens"] == prefilled


def test_verbose_setting_shows_the_prompt_unless_a_request_says_no(llama_server_defaults: Server) -> None:
    """`[chat_completions] verbose` (llama-server's `--verbose`): every non-streamed answer gets
    `__verbose`; a request's `verbose: false` still turns it off."""
    ask = {"model": "tiny", "max_tokens": 2, "messages": [{"role": "user", "content": "Name a colour"}]}
    for path in ("/v1/chat/completions", "/chat/completions"):
        answer = post(server := llama_server_defaults, path, ask).json()
        assert "Name a colour" in answer["__verbose"]["prompt"]
        assert answer["__verbose"]["content"] == answer["choices"][0]["message"]["content"]
        assert "__verbose" not in post(server, path, {**ask, "verbose": False}).json()


def test_generation_settings_report_the_models_default_seed(llama_server_defaults: Server) -> None:
    """llama-server's `--seed` (the model's `sampling` seed) is the seed `generation_settings`
    reports for a request that gives none, streamed or not; a request's own seed wins."""
    ask = {"prompt": PROMPT, "n_predict": 2}
    assert post(llama_server_defaults, "/completion", ask).json()["generation_settings"]["seed"] == 42
    own = post(llama_server_defaults, "/completion", {**ask, "seed": 7}).json()
    assert own["generation_settings"]["seed"] == 7
    streamed = post(llama_server_defaults, "/completion", {**ask, "stream": True})
    final = json.loads([f for f in parse_sse(streamed.text) if f.data is not None][-1].data or "")
    assert final["generation_settings"]["seed"] == 42
    assert final["generation_settings"]["adaptive_target"] == -1.0  # adaptive-p: not built, off


def llamacpp_metrics(server: Server) -> tuple[dict[bytes, bytes], dict[str, float]]:
    response = httpx.get(server.base_url + "/metrics")
    assert response.status_code == 200
    values = {}
    for line in response.text.splitlines():
        if line.startswith("llamacpp:"):
            name, value = line.split(" ", 1)
            values[name] = float(value)
    return dict(response.headers.raw), values


def test_metrics_under_llama_servers_names_count_what_timings_report(server: Server) -> None:
    _, before = llamacpp_metrics(server)
    timings = [
        post(server, "/completion", {"prompt": PROMPT, "n_predict": n, "seed": 1}).json()["timings"]
        for n in (1, 5)
    ]
    head, after = llamacpp_metrics(server)
    # The header's name as llama-server writes it: clients read it from a plain dict.
    assert int(head[b"Process-Start-Time-Unix"]) > 0

    def grew(name: str) -> float:
        return after[name] - before.get(name, 0.0)

    assert grew("llamacpp:prompt_tokens_total") == sum(t["prompt_n"] for t in timings)
    assert grew("llamacpp:prompt_tokens_cached_total") == sum(t["cache_n"] for t in timings)
    assert grew("llamacpp:tokens_predicted_total") == sum(t["predicted_n"] for t in timings) == 6
    assert grew("llamacpp:n_decode_total") > 0 and after["llamacpp:requests_processing"] == 0
    # The rate is over the decode steps: the first token came with the prompt.
    one, five = timings
    assert one["predicted_per_second"] == 0.0 and one["predicted_per_token_ms"] == 0.0
    assert five["predicted_per_token_ms"] == pytest.approx(five["predicted_ms"] / 4)


def test_metrics_and_slots_switched_off_are_llama_servers_501(start_server: StartServer) -> None:
    off = start_server(server={"metrics": False, "slots": False}, models=[scripted("chat", "chat.yaml")])
    for path in ("/metrics", "/slots"):
        response = httpx.get(off.base_url + path)
        assert response.status_code == 501, path
        assert response.json()["error"]["type"] == "not_supported_error"


def test_models_list_llama_servers_aliases_tags_and_models(server: Server) -> None:
    for path in ("/v1/models", "/models"):
        body = httpx.get(server.base_url + path, headers={"Accept": "application/json"}).json()
        tiny = next(m for m in body["data"] if m["id"] == "tiny")
        assert tiny["aliases"] == ["tiny", "little"]  # names, not patterns
        assert tiny["tags"] == ["chat", "small"]
        chat = next(m for m in body["data"] if m["id"] == "chat")
        assert chat["aliases"] == ["chat"] and chat["tags"] == []
        # llama-server's second list, in Ollama's shape, which its web UI reads
        listed = {m["model"]: m for m in body["models"]}
        assert listed["tiny"]["capabilities"] == ["completion"] and listed["tiny"]["tags"] == [
            "chat",
            "small",
        ]
        assert listed["tiny"]["details"]["format"] == "gguf"
    one = httpx.get(server.base_url + "/v1/models/tiny").json()
    assert one["aliases"] == ["tiny", "little"] and one["tags"] == ["chat", "small"]


def test_generation_settings_show_the_logit_bias_applied(server: Server) -> None:
    plain = post(server, "/completion", {"prompt": PROMPT, "n_predict": 2}).json()
    assert plain["generation_settings"]["logit_bias"] == []
    banned = post(server, "/completion", {"prompt": PROMPT, "n_predict": 2, "ignore_eos": True}).json()
    entries = banned["generation_settings"]["logit_bias"]
    # every end-of-generation token, banned (-inf is null in llama-server's JSON)
    assert entries and all(e["bias"] is None and isinstance(e["token"], int) for e in entries)
    two = post(server, "/completion", {"prompt": [PROMPT, "Far"], "n_predict": 2, "logit_bias": [[5, -2.5]]})
    assert all(a["generation_settings"]["logit_bias"] == [{"bias": -2.5, "token": 5}] for a in two.json())


def test_verbose_chat_completion_shows_the_rendered_prompt(server: Server) -> None:
    ask = {"model": "tiny", "max_tokens": 2, "messages": [{"role": "system", "content": "Book"}]}
    ask["messages"].append({"role": "user", "content": "What is the best book"})
    for path in ("/v1/chat/completions", "/chat/completions"):
        verbose = post(server, path, {**ask, "verbose": True}).json()
        shown = verbose["__verbose"]
        assert "Book" in shown["prompt"] and "What is the best book" in shown["prompt"]
        assert shown["content"] == verbose["choices"][0]["message"]["content"]
        assert shown["tokens_predicted"] == verbose["usage"]["completion_tokens"]
        assert "__verbose" not in post(server, path, {**ask, "verbose": False}).json()
        assert "__verbose" not in post(server, path, ask).json()


def test_prompt_progress_streamed_with_its_timings(server: Server) -> None:
    body = {
        "prompt": PROMPT * 6,
        "n_predict": 2,
        "stream": True,
        "return_progress": True,
        "cache_prompt": False,
    }
    with httpx.stream("POST", server.base_url + "/completion", json=body, timeout=60.0) as response:
        objects = [json.loads(f.data or "") for f in parse_sse(response.read().decode()) if f.data]
    progress = [o for o in objects if "prompt_progress" in o]
    assert len(progress) > 1  # the prompt took several steps (batch_size 16)
    first = progress[0]
    assert first["timings"]["prompt_n"] == 0 and first["timings"]["prompt_ms"] == 0.0
    assert first["prompt_progress"]["processed"] == first["prompt_progress"]["cache"]
    last = progress[-1]["prompt_progress"]
    assert last["processed"] == last["total"] == objects[-1]["tokens_evaluated"]
    times = [o["timings"]["prompt_ms"] for o in progress]
    assert times == sorted(times) and times[-1] > 0
    assert all(o["stop"] is False and o["content"] == "" for o in progress)
    # without it, none
    plain = {**body, "return_progress": False}
    with httpx.stream("POST", server.base_url + "/completion", json=plain, timeout=60.0) as response:
        assert "prompt_progress" not in response.read().decode()
