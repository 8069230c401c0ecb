"""llama-server's `multimodal_data` on `/completion`: a raw prompt whose `<__media__>` markers
stand where base64 images go, read by the demo vision GGUF's projector (libmtmd) through the
same path as Chat Completions' images.

The demo's replies are nonsense, but a function of the image: at temperature 0 the same image
gives the same reply and a different one a different reply.
"""

from __future__ import annotations

import base64
import io
import json
from typing import Any

import httpx
import pytest
from conftest import StartServer
from e2e_support import Server, parse_sse
from PIL import Image

pytestmark = pytest.mark.e2e

EYE, EYE_SINGLE, BLIND = "eye", "eye-single", "blind"  # batched, one sequence, no projector
IMAGE_TOKENS = 16  # the demo projector's (32x32 in 8x8 patches)
PROMPT = "What is this: <__media__>\n"


def image(color: tuple[int, int, int]) -> str:
    out = io.BytesIO()
    Image.new("RGB", (48, 40), color).save(out, "PNG")
    return base64.b64encode(out.getvalue()).decode()


RED, BLUE = image((220, 20, 20)), image((20, 20, 220))


@pytest.fixture(scope="module")
def server(start_server: StartServer, tmp_path_factory: pytest.TempPathFactory) -> Server:
    from sluicegate.demo.model import make_demo_gguf
    from sluicegate.demo.vision import make_demo_vision

    eye = tmp_path_factory.mktemp("eye") / "eye.gguf"
    make_demo_vision(eye, ends_replies=False)  # writes mmproj-eye.gguf beside it: found there
    blind = make_demo_gguf(tmp_path_factory.mktemp("blind") / "blind.gguf", ends_replies=False)
    common = {"engine": "llamacpp", "path": str(eye), "batch_size": 16, "context_length": 1024}
    return start_server(
        models=[
            {"id": EYE, **common},
            {"id": EYE_SINGLE, **common, "batching": False},
            {"id": BLIND, **common, "path": str(blind)},
        ],
    )


def complete(server: Server, model: str, prompt: Any, **extra: Any) -> httpx.Response:
    body = {"model": model, "prompt": prompt, "temperature": 0.0, "top_k": 1, "n_predict": 8, **extra}
    return httpx.post(server.base_url + "/completion", json=body, timeout=60.0)


def with_images(text: str, *images: str) -> dict[str, Any]:
    return {"prompt_string": text, "multimodal_data": list(images)}


@pytest.mark.parametrize("model", [EYE, EYE_SINGLE])
def test_completion_reads_the_images(server: Server, model: str) -> None:
    red = complete(server, model, with_images(PROMPT, RED))
    assert red.status_code == 200, red.text
    again = complete(server, model, with_images(PROMPT, RED)).json()
    blue = complete(server, model, with_images(PROMPT, BLUE)).json()
    assert red.json()["content"] == again["content"] != blue["content"]
    plain = complete(server, model, "What is this: \n").json()
    assert red.json()["tokens_evaluated"] >= plain["tokens_evaluated"] + IMAGE_TOKENS - 1
    two_response = complete(server, model, with_images("a <__media__> b <__media__> c", RED, BLUE))
    assert two_response.status_code == 200, two_response.text
    two = two_response.json()
    without = complete(server, model, "a  b  c").json()
    assert two["tokens_evaluated"] >= without["tokens_evaluated"] + 2 * IMAGE_TOKENS - 2
    # Streamed: the same text.
    body = {"model": model, "prompt": with_images(PROMPT, RED), "temperature": 0.0, "top_k": 1}
    with httpx.stream(
        "POST", server.base_url + "/completion", json={**body, "n_predict": 8, "stream": True}, timeout=60.0
    ) as response:
        assert response.status_code == 200
        frames = [f for f in parse_sse(response.read().decode()) if f.data is not None]
    assert "".join(json.loads(f.data or "")["content"] for f in frames) == red.json()["content"]


@pytest.mark.parametrize(
    ("prompt", "fragment"),
    [
        (with_images(PROMPT, "malformed"), "base64"),  # not base64
        (with_images(PROMPT, base64.b64encode(b"<html></html>").decode()), "decoded as an image"),
        (with_images("What is this:\n", ""), "decoded as an image"),  # the suite's empty string
        (with_images("no marker here", RED), "media markers"),
        (with_images(PROMPT, RED, BLUE), "media markers"),
        (with_images([1, 2], RED), "prompt_string"),
        (with_images("What is this: <__media__>", RED), "cannot end with an image"),
        ([with_images(PROMPT, RED), "and another"], "one prompt"),
    ],
)
def test_bad_multimodal_data_is_a_400_in_llama_servers_shape(
    server: Server, prompt: Any, fragment: str
) -> None:
    response = complete(server, EYE, prompt)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == 400 and error["type"] == "invalid_request_error"
    assert fragment in error["message"], error["message"]


def test_a_model_without_a_projector_answers_llama_servers_error(server: Server) -> None:
    response = complete(server, BLIND, with_images(PROMPT, RED))
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert "Multimodal data provided, but model" in error["message"]
    assert "does not support multimodal requests" in error["message"]
    # The same prompt without images is served.
    assert complete(server, BLIND, {"prompt_string": "What is this:\n"}).status_code == 200
