"""llama-server's LoRA adapters on a real llama.cpp model: the demo GGUF with a tiny adapter
written for it (sluicegate.demo.lora), loaded beside it with the model's `lora` key, as
llama.cpp's tests/unit/test_lora.py drives them: `GET /lora-adapters` lists it, `POST` sets the
scale requests run with, and a request's own `lora` overrides it, also side by side with
another request at another scale. Scale 0 is the model without the adapter."""

from __future__ import annotations

import threading
from typing import Any

import httpx
import pytest
from conftest import StartServer
from e2e_support import Server

pytestmark = pytest.mark.e2e

PROMPT = "Once upon a time, in a land far away, there lived a"


@pytest.fixture(scope="module")
def server(start_server: StartServer, tmp_path_factory: pytest.TempPathFactory) -> Server:
    from sluicegate.demo.lora import make_demo_lora
    from sluicegate.demo.model import make_demo_gguf

    folder = tmp_path_factory.mktemp("gguf")
    gguf = make_demo_gguf(folder / "tiny.gguf", ends_replies=False)
    lora = make_demo_lora(gguf, folder / "tiny-lora.gguf")
    model = {"engine": "llamacpp", "path": str(gguf), "batch_size": 16, "context_length": 512, "parallel": 2}
    return start_server(
        models=[
            {**model, "id": "tiny", "lora": [{"path": str(lora), "scale": 1.0}]},
            {**model, "id": "plain"},  # the same weights, no adapter
            {**model, "id": "single", "batching": False, "lora": [str(lora)]},  # one sequence
        ]
    )


def complete(server: Server, **extra: Any) -> dict[str, Any]:
    body = {"prompt": PROMPT, "n_predict": 12, "temperature": 0, "n_probs": 3, **extra}
    response = httpx.post(server.base_url + "/completion", json=body, timeout=120.0)
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


def first_logprobs(answer: dict[str, Any]) -> list[tuple[str, float]]:
    top = answer["completion_probabilities"][0]["top_logprobs"]
    return [(t["token"], round(t["logprob"], 4)) for t in top]


def set_scales(server: Server, body: Any) -> httpx.Response:
    return httpx.post(server.base_url + "/lora-adapters?model=tiny", json=body, timeout=30.0)


def test_the_adapter_is_listed(server: Server) -> None:
    assert set_scales(server, [{"id": 0, "scale": 1.0}]).json() == {"success": True}
    listed = httpx.get(server.base_url + "/lora-adapters?model=tiny").json()
    assert [(a["id"], a["scale"]) for a in listed] == [(0, 1.0)]
    assert listed[0]["path"].endswith("tiny-lora.gguf")
    assert httpx.get(server.base_url + "/lora-adapters?model=plain").json() == []


def test_a_scale_changes_the_output_and_zero_is_no_adapter(server: Server) -> None:
    plain = complete(server, model="plain")
    off = complete(server, model="tiny", lora=[{"id": 0, "scale": 0.0}])
    on = complete(server, model="tiny", lora=[{"id": 0, "scale": 1.0}])
    left_out = complete(server, model="tiny", lora=[])  # an adapter left out is at 0
    assert off["content"] == plain["content"] == left_out["content"]
    assert first_logprobs(off) == first_logprobs(plain)
    assert on["content"] != off["content"] and first_logprobs(on) != first_logprobs(off)


def test_chat_completions_takes_lora_through_the_openai_sdk(server: Server) -> None:
    import openai

    client = openai.OpenAI(base_url=server.api_url, api_key="unused", max_retries=0, timeout=120.0)

    def chat(model: str, scale: float | None = None) -> str | None:
        extra = {} if scale is None else {"extra_body": {"lora": [{"id": 0, "scale": scale}]}}
        answer = client.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": PROMPT}],
            max_tokens=12,
            temperature=0,
            **extra,  # type: ignore[arg-type]
        )
        return answer.choices[0].message.content

    plain, off, on = chat("plain"), chat("tiny", 0.0), chat("tiny", 1.0)
    assert off == plain and on != off


def test_without_batching(server: Server) -> None:
    plain = complete(server, model="plain")
    on = complete(server, model="single")  # a path's scale is 1
    off = complete(server, model="single", lora=[{"id": 0, "scale": 0.0}])
    assert off["content"] == plain["content"] and on["content"] != off["content"]
    assert (
        complete(server, model="single")["content"] == on["content"]
    )  # the cache is not reused across scales


def test_post_sets_the_scale_of_requests_without_lora(server: Server) -> None:
    off = complete(server, model="tiny", lora=[{"id": 0, "scale": 0.0}])["content"]
    on = complete(server, model="tiny", lora=[{"id": 0, "scale": 1.0}])["content"]
    try:
        assert set_scales(server, [{"id": 0, "scale": 0.0}]).status_code == 200
        assert complete(server, model="tiny")["content"] == off
        assert httpx.get(server.base_url + "/lora-adapters?model=tiny").json()[0]["scale"] == 0.0
        assert set_scales(server, [{"id": 0, "scale": 1.0}]).status_code == 200
        assert complete(server, model="tiny")["content"] == on
    finally:
        set_scales(server, [{"id": 0, "scale": 1.0}])


def test_a_cache_is_reused_only_under_its_own_scale(server: Server) -> None:
    httpx.post(server.base_url + "/slots/0?action=erase&model=tiny", timeout=30.0)
    on = complete(server, model="tiny", id_slot=0, lora=[{"id": 0, "scale": 1.0}])
    again = complete(server, model="tiny", id_slot=0, lora=[{"id": 0, "scale": 1.0}])
    assert again["timings"]["cache_n"] > 0 and again["content"] == on["content"]
    other = complete(server, model="tiny", id_slot=0, lora=[{"id": 0, "scale": 0.0}])
    assert other["timings"]["cache_n"] == 0  # the cached prompt holds scale 1's values


def test_requests_at_different_scales_side_by_side(server: Server) -> None:
    """llama.cpp applies adapters to the whole context: each step decodes one scale's sequences."""
    scales = [0.0, 1.0, 0.0, 1.0]
    alone = {
        s: complete(server, model="tiny", lora=[{"id": 0, "scale": s}], n_predict=40)["content"]
        for s in (0.0, 1.0)
    }
    results: dict[int, str] = {}

    def run(i: int) -> None:
        results[i] = complete(server, model="tiny", lora=[{"id": 0, "scale": scales[i]}], n_predict=40)[
            "content"
        ]

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(scales))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert [results[i] for i in range(len(scales))] == [alone[s] for s in scales]


@pytest.mark.parametrize(
    "body",
    [
        {"lora": [{"id": 5, "scale": 1.0}]},
        {"lora": [{"id": 0, "scale": "high"}]},
        {"lora": {"id": 0}},
    ],
)
def test_a_bad_lora_is_a_400(server: Server, body: dict[str, Any]) -> None:
    response = httpx.post(
        server.base_url + "/completion", json={"prompt": "x", "model": "tiny", "n_predict": 2, **body}
    )
    assert response.status_code == 400, response.text
    assert response.json()["error"]["code"] == 400


def test_a_bad_scales_body_is_a_400(server: Server) -> None:
    for body in ({"id": 0}, [{"id": 3, "scale": 1}]):
        response = set_scales(server, body)
        assert response.status_code == 400 and response.json()["error"]["type"] == "invalid_request_error"
