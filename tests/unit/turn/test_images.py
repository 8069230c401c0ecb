"""Image parts decoded before an engine that reads pixels: data URLs, http(s) URLs only when
allowed, through the SSRF guard, with a byte and a time cap, and file:// URLs only from under
the media path."""

from __future__ import annotations

import asyncio
import base64
import io
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from PIL import Image

from audio_support import tone_wav
from sluicegate.core.allowlist import AllowList
from sluicegate.core.audio import AudioLimits
from sluicegate.core.errors import SluicegateError
from sluicegate.core.images import ImageLimits
from sluicegate.core.request import ChatRequest, ContentPart, Message
from sluicegate.turn.images import ImageSettings, load_audio, load_images

PNG = io.BytesIO()
Image.new("RGB", (20, 10), (1, 2, 3)).save(PNG, "PNG")
IMAGE = PNG.getvalue()


@pytest.fixture
async def site() -> AsyncIterator[str]:
    """A loopback HTTP server: /a.png answers the image, /slow never answers."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        request = await reader.readuntil(b"\r\n\r\n")
        if b"/slow" in request:
            await asyncio.sleep(30)
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(IMAGE) + IMAGE
        )
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        yield f"http://127.0.0.1:{port}"


def request(*urls: str) -> ChatRequest:
    return ChatRequest("m", [Message("user", [ContentPart("image", image_url=u) for u in urls])])


def settings(**kwargs: object) -> ImageSettings:
    values: dict[str, object] = {"fetch_urls": True, "allowed_hosts": AllowList.parse(["127.0.0.1"])}
    return ImageSettings(**{**values, **kwargs})  # type: ignore[arg-type]


async def code(chat: ChatRequest, images: ImageSettings) -> str | None:
    with pytest.raises(SluicegateError) as caught:
        await load_images(chat, images)
    return caught.value.info.code


async def test_an_allowed_url_is_fetched_and_decoded(site: str) -> None:
    chat = request(f"{site}/a.png")
    await load_images(chat, settings())
    part = chat.messages[0].content[0]
    assert isinstance(part, ContentPart) and part.picture is not None
    assert (part.picture.width, part.picture.height) == (20, 10)


async def test_urls_are_refused_unless_allowed(site: str) -> None:
    assert await code(request(f"{site}/a.png"), ImageSettings()) == "image_url_not_allowed"
    # Allowed, but loopback is not public and not on the allow-list: the SSRF guard says no.
    assert (
        await code(request(f"{site}/a.png"), settings(allowed_hosts=AllowList())) == "image_url_not_allowed"
    )
    assert await code(request("ftp://example.com/a.png"), settings()) == "invalid_image"


async def test_byte_and_time_caps(site: str) -> None:
    assert (
        await code(request(f"{site}/a.png"), settings(limits=ImageLimits(max_bytes=20))) == "image_too_large"
    )
    assert await code(request(f"{site}/slow"), settings(fetch_timeout=0.2)) == "image_fetch_failed"
    assert (
        await code(request(f"{site}/a.png"), settings(limits=ImageLimits(max_images=0))) == "too_many_images"
    )


async def test_audio_parts_are_checked_within_their_own_limits() -> None:
    clip = base64.b64encode(tone_wav(440.0, rate=8_000)).decode()
    chat = ChatRequest(
        "m", [Message("user", [ContentPart("audio", audio_data=clip, audio_format="wav")] * 2)]
    )
    with pytest.raises(SluicegateError) as caught:
        await load_audio(chat, AudioLimits(max_clips=1))
    assert caught.value.info.code == "too_many_audio_clips"
    await load_audio(chat, AudioLimits(max_clips=2))
    sounds = [part.sound for part in chat.messages[0].content if not isinstance(part, str)]
    assert all(sound is not None and sound.seconds == 1.0 for sound in sounds)
    assert ImageSettings().audio == AudioLimits()


async def test_a_request_s_images_together_stay_within_the_pixel_budget() -> None:
    """Sixteen images of 5600 x 5600 (122 KB each as PNG) passed every per-image limit and
    decoded to 1.5 GB of pixels; all of a request's images are counted, before any is decoded."""
    big = io.BytesIO()
    Image.new("RGB", (2000, 1000)).save(big, "PNG")
    url = "data:image/png;base64," + base64.b64encode(big.getvalue()).decode()
    limits = ImageLimits(max_pixels=2_000_000, max_request_pixels=5_000_000)
    assert await code(request(*[url] * 3), ImageSettings(limits=limits)) == "image_too_large"
    with pytest.raises(SluicegateError) as caught:
        await load_images(request(*[url] * 3), ImageSettings(limits=limits))
    assert "6000000 pixels in all" in caught.value.info.message
    chat = request(*[url] * 2)
    await load_images(chat, ImageSettings(limits=limits))
    # Decoded ones count too: a third image added to the same request goes over.
    chat.messages[0].content.append(ContentPart("image", image_url=url))  # type: ignore[union-attr]
    assert await code(chat, ImageSettings(limits=limits)) == "image_too_large"


@pytest.fixture
def media(tmp_path: Path) -> Path:
    """A media folder holding pics/a.png; a secret beside it, and a link out of it."""
    (tmp_path / "media" / "pics").mkdir(parents=True)
    (tmp_path / "media" / "pics" / "a.png").write_bytes(IMAGE)
    (tmp_path / "secret.png").write_bytes(IMAGE)
    (tmp_path / "media" / "out.png").symlink_to(tmp_path / "secret.png")
    return tmp_path / "media"


@pytest.mark.parametrize("url", ["file://pics/a.png", "file:////pics//a.png"])
async def test_file_urls_are_read_under_the_media_path(media: Path, url: str) -> None:
    chat = request(url)
    await load_images(chat, ImageSettings(media_path=media))
    part = chat.messages[0].content[0]
    assert isinstance(part, ContentPart) and part.picture is not None
    assert (part.picture.width, part.picture.height) == (20, 10)


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("file://../secret.png", "image_url_not_allowed"),  # no way up
        ("file://pics/../../secret.png", "image_url_not_allowed"),
        ("file://out.png", "invalid_image"),  # a link out of the folder is not followed out
        ("file://pics/none.png", "invalid_image"),
        ("file://pics", "invalid_image"),  # a folder
        ("file://", "image_url_not_allowed"),
    ],
)
async def test_file_urls_never_leave_the_media_path(media: Path, url: str, expected: str) -> None:
    assert await code(request(url), ImageSettings(media_path=media)) == expected


async def test_file_urls_are_refused_without_a_media_path(media: Path) -> None:
    assert await code(request("file://pics/a.png"), ImageSettings()) == "image_url_not_allowed"
