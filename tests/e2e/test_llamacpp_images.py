"""Images on a local GGUF with a projector (libmtmd): the demo vision pair, driven by the
official clients in every dialect.

The demo's replies are nonsense, but a function of the image: at temperature 0 the same image
gives the same reply and a different one a different reply.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import anthropic
import httpx
import openai
import pytest
from conftest import StartServer
from e2e_support import Server
from PIL import Image

pytestmark = pytest.mark.e2e

EYE = "eye"  # the vision demo, continuous batching (the default)
EYE_SINGLE = "eye-single"  # the same files, one sequence per context
BLIND = "blind"  # the text demo: no projector
EYE_SHORT = "eye-short"  # the vision demo with a 256-token context: an image can overflow it
EYE_IDLE = "eye-idle"  # the vision demo, never loaded in the session: counted before a load
SHORT_CONTEXT = 256
MAX_PIXELS = 1_000_000
IMAGE_TOKENS = 16  # the demo projector's (32x32 in 8x8 patches)


def encoded(color: Any, fmt: str = "PNG", size: tuple[int, int] = (48, 40)) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", size, color).save(out, fmt)
    return out.getvalue()


def data_url(data: bytes, mime: str = "image/png") -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode()}"


RED = data_url(encoded((220, 20, 20)))
BLUE = data_url(encoded((20, 20, 220)))


@pytest.fixture(scope="session")
def vision_server(start_server: StartServer, tmp_path_factory: pytest.TempPathFactory) -> Server:
    from sluicegate.demo.model import make_demo_gguf
    from sluicegate.demo.vision import make_demo_vision

    eye = tmp_path_factory.mktemp("eye") / "eye.gguf"
    make_demo_vision(eye, ends_replies=False)  # writes mmproj-eye.gguf beside it: found there
    blind = make_demo_gguf(tmp_path_factory.mktemp("blind") / "blind.gguf", ends_replies=False)
    common = {"engine": "llamacpp", "path": str(eye), "batch_size": 16, "context_length": 1024}
    return start_server(
        server={"max_image_pixels": MAX_PIXELS, "max_images_per_request": 3},
        models=[
            {"id": EYE, **common},
            {"id": EYE_SINGLE, **common, "batching": False},
            {"id": BLIND, **common, "path": str(blind)},
            {"id": EYE_SHORT, **common, "context_length": SHORT_CONTEXT},
            {"id": EYE_IDLE, **common},
        ],
    )


@pytest.fixture
def sdk(vision_server: Server) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=vision_server.api_url, api_key="unused", max_retries=0, timeout=60) as client:
        yield client


@pytest.fixture
def claude(vision_server: Server) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(
        base_url=vision_server.base_url, api_key="unused", max_retries=0, timeout=60
    ) as client:
        yield client


def chat(sdk: openai.OpenAI, model: str, *urls: str, text: str = "What is in the picture?") -> Any:
    content: list[Any] = [{"type": "text", "text": text}]
    content += [{"type": "image_url", "image_url": {"url": url}} for url in urls]
    return sdk.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": content}],
        temperature=0,
        max_tokens=12,
    )


@pytest.mark.parametrize("model", [EYE, EYE_SINGLE])
def test_chat_completions_replies_depend_on_the_image(sdk: openai.OpenAI, model: str) -> None:
    red = chat(sdk, model, RED)
    again = chat(sdk, model, RED)
    blue = chat(sdk, model, BLUE)
    assert red.choices[0].message.content == again.choices[0].message.content
    assert red.choices[0].message.content != blue.choices[0].message.content
    plain = chat(sdk, model)
    assert red.usage is not None and plain.usage is not None
    assert red.usage.prompt_tokens >= plain.usage.prompt_tokens + IMAGE_TOKENS - 1  # the image's tokens
    two = chat(sdk, model, RED, BLUE)
    assert two.usage is not None and two.usage.prompt_tokens >= red.usage.prompt_tokens + IMAGE_TOKENS


@pytest.mark.parametrize("model", [EYE, EYE_SINGLE])
def test_a_second_turn_with_the_same_image_reuses_the_cache(sdk: openai.OpenAI, model: str) -> None:
    green = data_url(encoded((20, 200, 20)))
    first_turn = [
        {
            "role": "user",
            "content": [
                {"type": "image_url", "image_url": {"url": green}},
                {"type": "text", "text": "And this?"},
            ],
        }
    ]
    first = sdk.chat.completions.create(model=model, messages=first_turn, temperature=0, max_tokens=8)
    answer = first.choices[0].message.content
    second = sdk.chat.completions.create(
        model=model,
        messages=[
            *first_turn,
            {"role": "assistant", "content": answer},
            {"role": "user", "content": "More."},
        ],
        temperature=0,
        max_tokens=8,
    )
    assert second.usage is not None and second.usage.prompt_tokens_details is not None
    cached = second.usage.prompt_tokens_details.cached_tokens or 0
    assert cached > IMAGE_TOKENS  # the prefix through the image was not decoded again


def test_an_image_request_batches_beside_a_running_stream(sdk: openai.OpenAI) -> None:
    """Continuous batching: the image is admitted while another sequence streams, and its reply
    is the one it gets alone."""
    alone = chat(sdk, EYE, BLUE, text="Batched?").choices[0].message.content
    with ThreadPoolExecutor(2) as pool:
        long = pool.submit(
            sdk.chat.completions.create,
            model=EYE,
            messages=[{"role": "user", "content": "Talk for a while."}],
            temperature=0,
            max_tokens=60,
        )
        beside = pool.submit(chat, sdk, EYE, BLUE, text="Batched?")
        assert beside.result().choices[0].message.content == alone
        assert long.result().usage.completion_tokens == 60


def test_image_formats(sdk: openai.OpenAI) -> None:
    replies = set()
    for fmt, mime in (("JPEG", "image/jpeg"), ("WEBP", "image/webp"), ("GIF", "image/gif")):
        reply = chat(sdk, EYE, data_url(encoded((200, 200, 0), fmt), mime))
        assert reply.usage is not None and reply.choices[0].message.content
        replies.add(reply.choices[0].message.content)
    assert replies


def test_responses_input_image(sdk: openai.OpenAI) -> None:
    def ask(url: str) -> Any:
        return sdk.responses.create(
            model=EYE,
            input=[
                {
                    "role": "user",
                    "content": [
                        {"type": "input_text", "text": "Describe it."},
                        {"type": "input_image", "image_url": url, "detail": "auto"},
                    ],
                }
            ],
            temperature=0,
            max_output_tokens=12,
        )

    red, again, blue = ask(RED), ask(RED), ask(BLUE)
    assert red.output_text == again.output_text != blue.output_text
    assert red.usage is not None and red.usage.input_tokens > IMAGE_TOKENS


def test_a_stored_responses_turn_keeps_its_image(sdk: openai.OpenAI) -> None:
    """The image travels in the stored conversation: the next turn (previous_response_id) sees
    it again, and its prefix, image included, comes from the cache."""
    first = sdk.responses.create(
        model=EYE,
        input=[
            {
                "role": "user",
                "content": [
                    {"type": "input_image", "image_url": data_url(encoded((90, 60, 30))), "detail": "auto"},
                    {"type": "input_text", "text": "Remember this."},
                ],
            }
        ],
        temperature=0,
        max_output_tokens=6,
    )
    second = sdk.responses.create(
        model=EYE, previous_response_id=first.id, input="And now?", temperature=0, max_output_tokens=6
    )
    assert second.usage is not None and first.usage is not None
    assert second.usage.input_tokens > first.usage.input_tokens
    assert second.usage.input_tokens_details.cached_tokens > IMAGE_TOKENS


def test_anthropic_image_block(claude: anthropic.Anthropic) -> None:
    def ask(color: Any) -> Any:
        return claude.messages.create(
            model=EYE,
            max_tokens=12,
            extra_body={"temperature": 0},
            messages=[
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "image",
                            "source": {
                                "type": "base64",
                                "media_type": "image/png",
                                "data": base64.b64encode(encoded(color)).decode(),
                            },
                        },
                        {"type": "text", "text": "What is this?"},
                    ],
                }
            ],
        )

    red, again, blue = ask((220, 20, 20)), ask((220, 20, 20)), ask((20, 20, 220))
    assert red.content[0].text == again.content[0].text != blue.content[0].text
    assert red.usage.input_tokens > IMAGE_TOKENS


def test_lmstudio_image_part(vision_server: Server) -> None:
    def ask(url: str) -> Any:
        body = {
            "model": EYE,
            "input": [{"type": "text", "content": "What is it?"}, {"type": "image", "data_url": url}],
            "temperature": 0,
            "max_output_tokens": 12,
            "store": False,
        }
        response = httpx.post(f"{vision_server.base_url}/api/v1/chat", json=body, timeout=60)
        assert response.status_code == 200, response.text
        return response.json()

    red, again, blue = ask(RED), ask(RED), ask(BLUE)
    assert red["output"] == again["output"] != blue["output"]
    assert red["stats"]["input_tokens"] > IMAGE_TOKENS


# --- refusals: a 400 in each dialect's shape ---------------------------------------------------

BROKEN = data_url(b"\x89PNG\r\n\x1a\nthis is not really a png")
HUGE = data_url(encoded((1, 2, 3), size=(1100, 1000)))  # 1.1 MP, above MAX_PIXELS


@pytest.mark.parametrize(
    ("url", "code"),
    [
        (BROKEN, "invalid_image"),
        (HUGE, "image_too_large"),
        ("https://example.com/a.png", "image_url_not_allowed"),
    ],
)
def test_bad_images_are_400s_in_chat_and_responses(sdk: openai.OpenAI, url: str, code: str) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        chat(sdk, EYE, url)
    assert caught.value.code == code
    with pytest.raises(openai.BadRequestError) as caught:
        sdk.responses.create(
            model=EYE,
            input=[
                {"role": "user", "content": [{"type": "input_image", "image_url": url, "detail": "auto"}]}
            ],
        )
    assert caught.value.code == code


def test_text_with_the_image_marker_is_refused(sdk: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        chat(sdk, EYE, RED, text="Is <__media__> an image?")
    assert caught.value.code == "invalid_image"


def test_too_many_images(sdk: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        chat(sdk, EYE, RED, RED, BLUE, BLUE)
    assert caught.value.code == "too_many_images"


def test_bad_images_in_anthropic_and_lmstudio(claude: anthropic.Anthropic, vision_server: Server) -> None:
    for url in (BROKEN, HUGE):
        data = url.split(",", 1)[1]
        with pytest.raises(anthropic.BadRequestError) as caught:
            claude.messages.create(
                model=EYE,
                max_tokens=4,
                messages=[
                    {
                        "role": "user",
                        "content": [
                            {
                                "type": "image",
                                "source": {"type": "base64", "media_type": "image/png", "data": data},
                            }
                        ],
                    }
                ],
            )
        assert caught.value.body["error"]["type"] == "invalid_request_error"
        body = {"model": EYE, "input": [{"type": "image", "data_url": url}], "store": False}
        response = httpx.post(f"{vision_server.base_url}/api/v1/chat", json=body, timeout=60)
        assert response.status_code == 400, response.text
        assert response.json()["error"]["type"] == "invalid_request"


def test_a_model_without_projector_refuses_images(
    sdk: openai.OpenAI, claude: anthropic.Anthropic, vision_server: Server
) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        chat(sdk, BLIND, RED)
    assert caught.value.code == "image_input_unsupported"
    with pytest.raises(openai.BadRequestError) as caught:
        sdk.responses.create(
            model=BLIND,
            input=[
                {"role": "user", "content": [{"type": "input_image", "image_url": RED, "detail": "auto"}]}
            ],
        )
    assert caught.value.code == "image_input_unsupported"
    with pytest.raises(anthropic.BadRequestError):
        claude.messages.create(
            model=BLIND,
            max_tokens=4,
            messages=[
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "image",
                            "source": {
                                "type": "base64",
                                "media_type": "image/png",
                                "data": RED.split(",", 1)[1],
                            },
                        }
                    ],
                }
            ],
        )
    body = {"model": BLIND, "input": [{"type": "image", "data_url": RED}], "store": False}
    response = httpx.post(f"{vision_server.base_url}/api/v1/chat", json=body, timeout=60)
    assert response.status_code == 400 and "image" in response.json()["error"]["message"]


def test_capabilities_say_vision(sdk: openai.OpenAI, vision_server: Server) -> None:
    listing = httpx.get(f"{vision_server.base_url}/api/v1/models", timeout=30).json()
    caps = {m["key"]: m.get("capabilities", {}) for m in listing["models"]}
    assert caps[EYE]["vision"] is True and caps[BLIND]["vision"] is False
    meta = {m.id: m.model_extra["meta"] for m in sdk.models.list().data if m.model_extra}
    assert meta[EYE]["vision"] is True and meta[BLIND]["vision"] is False


# --- a prompt the image makes too long; counting image tokens ----------------------------------


def _prompt_tokens(sdk: openai.OpenAI, text: str) -> int:
    """The prompt tokens of a one-message chat with this text (on EYE: the same files as the others)."""
    reply = sdk.chat.completions.create(
        model=EYE, messages=[{"role": "user", "content": text}], temperature=0, max_tokens=1
    )
    assert reply.usage is not None
    return reply.usage.prompt_tokens


def test_an_image_that_overflows_the_context_is_a_400_before_the_stream(
    sdk: openai.OpenAI, claude: anthropic.Anthropic
) -> None:
    """The text fits the context, the image's tokens do not: refused with the dialect's 400
    before the stream's first byte (as a text prompt that is too long is), whether the model is
    loaded yet or not."""
    probe = _prompt_tokens(sdk, "x" * 100)
    text = "x" * (100 + SHORT_CONTEXT - 8 - probe)  # 8 tokens short of the context
    assert _prompt_tokens(sdk, text) == SHORT_CONTEXT - 8

    def chat_stream() -> None:
        content = [{"type": "text", "text": text}, {"type": "image_url", "image_url": {"url": RED}}]
        stream = sdk.chat.completions.create(
            model=EYE_SHORT, messages=[{"role": "user", "content": content}], max_tokens=4, stream=True
        )
        list(stream)  # before the fix: the error came inside the stream

    def responses_stream() -> None:
        stream = sdk.responses.create(
            model=EYE_SHORT,
            input=[
                {
                    "role": "user",
                    "content": [
                        {"type": "input_text", "text": text},
                        {"type": "input_image", "image_url": RED, "detail": "auto"},
                    ],
                }
            ],
            max_output_tokens=4,
            stream=True,
        )
        list(stream)

    def anthropic_stream() -> None:
        image = {"type": "base64", "media_type": "image/png", "data": RED.split(",", 1)[1]}
        with claude.messages.stream(
            model=EYE_SHORT,
            max_tokens=4,
            messages=[
                {
                    "role": "user",
                    "content": [{"type": "text", "text": text}, {"type": "image", "source": image}],
                }
            ],
        ) as stream:
            list(stream)

    for loaded in (False, True):
        if loaded:  # the text alone fits, and loads the model
            reply = sdk.chat.completions.create(
                model=EYE_SHORT, messages=[{"role": "user", "content": text}], max_tokens=2
            )
            assert reply.usage is not None and reply.usage.prompt_tokens == SHORT_CONTEXT - 8
        for ask in (chat_stream, responses_stream):
            with pytest.raises(openai.BadRequestError) as caught:
                ask()
            assert caught.value.code == "context_length_exceeded", (loaded, ask.__name__)
        with pytest.raises(anthropic.BadRequestError) as refused:
            anthropic_stream()
        assert "context" in refused.value.message


def _count(server: Server, model: str, *content: dict[str, Any]) -> int:
    body = {"model": model, "messages": [{"role": "user", "content": list(content)}]}
    response = httpx.post(f"{server.base_url}/v1/messages/count_tokens", json=body, timeout=60)
    assert response.status_code == 200, response.text
    counted: int = response.json()["input_tokens"]
    return counted


def test_count_tokens_counts_the_image(vision_server: Server, claude: anthropic.Anthropic) -> None:
    """Anthropic's count_tokens counts an image's tokens as the model reads them: before the
    model is loaded (EYE_IDLE, through the projector on the tokenizer alone) and after, the
    same count the request itself reports."""
    text = {"type": "text", "text": "What is this?"}
    image = {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": RED.split(",", 1)[1]},
    }
    alone = _count(vision_server, EYE_IDLE, text)
    idle = _count(vision_server, EYE_IDLE, image, text)
    assert idle >= alone + IMAGE_TOKENS
    assert _count(vision_server, EYE_IDLE, image, image, text) == 2 * idle - alone
    usage = claude.messages.create(
        model=EYE, max_tokens=1, messages=[{"role": "user", "content": [image, text]}]
    ).usage
    used = usage.input_tokens + (usage.cache_read_input_tokens or 0)  # Anthropic's split of the prompt
    assert _count(vision_server, EYE, image, text) == used == idle


def test_audio_input_is_a_clear_400(sdk: openai.OpenAI) -> None:
    """Chat's `input_audio` parts on a model whose projector has no audio encoder (the vision
    demo's), or no projector at all: a 400 that says so (test_llamacpp_audio.py hears them)."""
    wav = base64.b64encode(b"RIFF\x24\x00\x00\x00WAVEfmt ").decode()
    for model in (EYE, BLIND):
        with pytest.raises(openai.BadRequestError) as caught:
            sdk.chat.completions.create(
                model=model,
                messages=[
                    {
                        "role": "user",
                        "content": [
                            {"type": "text", "text": "What is said?"},
                            {"type": "input_audio", "input_audio": {"data": wav, "format": "wav"}},
                        ],
                    }
                ],
                max_tokens=4,
            )
        assert caught.value.code == "audio_input_unsupported"
        assert "audio" in caught.value.message


def test_a_context_overflow_policy_counts_the_images(sdk: openai.OpenAI) -> None:
    """`rolling_window` drops an old turn whose image makes the prompt too long: the images are
    counted while the prompt is fitted, so the reply comes, trimmed, instead of an error."""
    old_turn = [
        {
            "role": "user",
            "content": [
                {"type": "image_url", "image_url": {"url": BLUE}},
                {"type": "text", "text": "x" * 120},
            ],
        },
        {"role": "assistant", "content": "Blue."},
    ]
    messages: Any = [*old_turn, {"role": "user", "content": "y" * 110}]
    raw = sdk.chat.completions.with_raw_response.create(
        model=EYE_SHORT,
        messages=messages,
        max_tokens=2,
        extra_body={"context_overflow": "rolling_window"},
    )
    reply = raw.parse()
    assert raw.headers["x-sluicegate-context-truncated"] == "2"
    assert reply.usage is not None and reply.usage.prompt_tokens < SHORT_CONTEXT - 100


def _tool_turns(model: str, color: Any, *, counting: bool = False) -> dict[str, Any]:
    """A tool call whose result is a screenshot: the image lives in the `tool_result`."""
    image = {
        "type": "image",
        "source": {
            "type": "base64",
            "media_type": "image/png",
            "data": base64.b64encode(encoded(color)).decode(),
        },
    }
    body: dict[str, Any] = {
        "model": model,
        "messages": [
            {"role": "user", "content": "Take a screenshot and say what it shows."},
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "toolu_1", "name": "screenshot", "input": {}}],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_1",
                        "content": [{"type": "text", "text": "done"}, image],
                    }
                ],
            },
        ],
        "tools": [{"name": "screenshot", "input_schema": {"type": "object"}}],
    }
    if not counting:
        body |= {"max_tokens": 12, "temperature": 0}
    return body


def test_an_image_in_a_tool_result_is_seen_and_counted(vision_server: Server) -> None:
    def ask(color: Any) -> dict[str, Any]:
        response = httpx.post(
            f"{vision_server.base_url}/v1/messages", json=_tool_turns(EYE, color), timeout=60
        )
        assert response.status_code == 200, response.text
        answer: dict[str, Any] = response.json()
        return answer

    red, again, blue = ask((220, 20, 20)), ask((220, 20, 20)), ask((20, 20, 220))
    assert red["content"] == again["content"] != blue["content"]  # the reply depends on the image
    counted = httpx.post(
        f"{vision_server.base_url}/v1/messages/count_tokens",
        json=_tool_turns(EYE, (220, 20, 20), counting=True),
    ).json()["input_tokens"]
    assert counted > IMAGE_TOKENS
    assert red["usage"]["input_tokens"] + (red["usage"].get("cache_read_input_tokens") or 0) == counted


def test_a_model_without_vision_refuses_an_image_in_a_tool_result(vision_server: Server) -> None:
    response = httpx.post(
        f"{vision_server.base_url}/v1/messages", json=_tool_turns(BLIND, (220, 20, 20)), timeout=60
    )
    assert response.status_code == 400
    assert (
        response.json()["error"]["type"] == "invalid_request_error"
        and "image" in response.json()["error"]["message"]
    )
