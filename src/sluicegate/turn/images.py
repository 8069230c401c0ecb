"""Before an engine that reads pixels sees a request: each image part's bytes, decoded.

Data URLs always; http(s) URLs only when `[server] allow_image_urls` is on, through the SSRF
guard (public addresses, or `[tools] allowed_hosts`), with the byte cap and a time cap;
`file://` URLs only from under `[server] media_path` (llama-server's `--media-path`). The
decoding runs in a worker thread, off the event loop, a few requests' at a time
(`core/checks.py`); one request's images together stay within `max_request_pixels`. Anything
wrong is a 400 in the client's dialect.
Audio parts (for an engine that hears them) are checked the same way, within their own limits.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path

from sluicegate.config import Settings
from sluicegate.core.allowlist import AllowList
from sluicegate.core.audio import AudioLimits, decode_audio
from sluicegate.core.checks import off_loop
from sluicegate.core.errors import invalid
from sluicegate.core.images import ImageLimits, check_size, data_url_bytes, decode_images
from sluicegate.core.request import ChatRequest, ContentPart
from sluicegate.tools.ssrf import UrlRefused, check_url


@dataclass(frozen=True, slots=True)
class ImageSettings:
    limits: ImageLimits = field(default_factory=ImageLimits)
    fetch_urls: bool = False  # `[server] allow_image_urls`
    allowed_hosts: AllowList = field(default_factory=AllowList)
    fetch_timeout: float = 10.0  # `[server] image_fetch_timeout_seconds`
    audio: AudioLimits = field(default_factory=AudioLimits)  # for Chat's `input_audio` parts
    media_path: Path | None = None  # `[server] media_path`: where file:// URLs are read from

    @classmethod
    def from_settings(cls, settings: Settings) -> ImageSettings:
        limits = ImageLimits(
            settings.max_image_bytes,
            settings.max_image_pixels,
            settings.max_images_per_request,
            settings.max_request_pixels,
        )
        return cls(
            limits,
            settings.allow_image_urls,
            AllowList.parse(settings.tools_allowed_hosts),
            settings.image_fetch_timeout_seconds,
            AudioLimits(settings.max_audio_bytes, settings.max_audio_seconds, settings.max_audio_per_request),
            settings.media_path,
        )


def image_parts(chat: ChatRequest, kind: str = "image") -> list[ContentPart]:
    """The request's parts of `kind`: its messages', and a raw prompt's (`multimodal_data`)."""
    media = chat.prompt.media if chat.prompt is not None else []
    return [
        part
        for message in chat.messages
        if not isinstance(message.content, str)
        for part in message.content
        if part.type == kind
    ] + [part for part in media if part.type == kind]


async def load_audio(chat: ChatRequest, limits: AudioLimits) -> None:
    """Fill in `sound` on every audio part of `chat` (those not already checked)."""
    parts = image_parts(chat, "audio")
    if not parts:
        return
    if len(parts) > limits.max_clips:
        raise invalid(
            f"The request has {len(parts)} audio clips, more than this server accepts ({limits.max_clips}).",
            code="too_many_audio_clips",
        )
    todo = [part for part in parts if part.sound is None]
    sounds = await off_loop(
        lambda: [decode_audio(part.audio_data, part.audio_format, limits) for part in todo]
    )
    for part, sound in zip(todo, sounds, strict=True):
        part.sound = sound


async def load_images(chat: ChatRequest, settings: ImageSettings) -> None:
    """Fill in `picture` on every image part of `chat` (those not already decoded)."""
    parts = image_parts(chat)
    if not parts:
        return
    limits = settings.limits
    if len(parts) > limits.max_images:
        raise invalid(
            f"The request has {len(parts)} images, more than this server accepts ({limits.max_images}).",
            code="too_many_images",
        )
    todo = [part for part in parts if part.picture is None]
    encoded = [await _image_bytes(part.image_url, settings) for part in todo]
    decoded = sum(p.picture.width * p.picture.height for p in parts if p.picture is not None)
    pictures = await off_loop(lambda: decode_images(encoded, limits, decoded))
    for part, picture in zip(todo, pictures, strict=True):
        part.picture = picture


async def _image_bytes(url: str, settings: ImageSettings) -> bytes:
    if url.startswith("data:"):
        data = data_url_bytes(url)
    elif url.startswith(("http://", "https://")):
        if not settings.fetch_urls:
            raise invalid(
                "Image URLs are not fetched by this server; send the image as a data URL (base64). "
                "The operator can allow URLs with [server] allow_image_urls.",
                code="image_url_not_allowed",
            )
        data = await fetch_image(url, settings)
    elif url.startswith("file://"):
        data = await off_loop(lambda: local_media(url, settings))
    else:
        raise invalid("Invalid image: expected a data: URL or an http(s) URL.", code="invalid_image")
    check_size(data, settings.limits)
    return data


def local_media(url: str, settings: ImageSettings) -> bytes:
    """A `file://` URL's bytes, its path read under `media_path` as llama-server reads it
    (`file://a/b.png`, `file:////a//b.png`: the same file); never a file outside that folder."""
    root = settings.media_path
    if root is None:
        raise invalid(
            "file:// image URLs are not read by this server; send the image as a data URL (base64). "
            "The operator can allow a folder with [server] media_path.",
            code="image_url_not_allowed",
        )
    parts = [part for part in url.removeprefix("file://").split("/") if part]
    if not parts or any(part in (".", "..") or "\\" in part or "\0" in part for part in parts):
        raise invalid("The file:// image URL's path is not allowed.", code="image_url_not_allowed")
    base = root.resolve()
    path = base.joinpath(*parts).resolve()  # links followed: the file itself must be under it
    if not path.is_relative_to(base) or not path.is_file():
        raise invalid(f"No image file {'/'.join(parts)!r} under the media path.", code="invalid_image")
    cap = settings.limits.max_bytes
    try:
        with path.open("rb") as file:
            data = file.read(cap + 1)
    except OSError:
        raise invalid(f"The image file {'/'.join(parts)!r} cannot be read.", code="invalid_image") from None
    if len(data) > cap:
        raise invalid(
            f"The image file is more than this server accepts ({cap} bytes).", code="image_too_large"
        )
    return data


async def fetch_image(url: str, settings: ImageSettings) -> bytes:
    """GET the URL, pinned to the address the SSRF guard checked; at most `max_bytes`, within
    `fetch_timeout` seconds all told."""
    import httpx2  # here: only a server that fetches image URLs holds the HTTP client

    from sluicegate.tools.pinned import PinnedTransport

    try:
        target = await check_url(url, settings.allowed_hosts)
    except UrlRefused as exc:
        raise invalid(f"The image URL cannot be fetched: {exc}.", code="image_url_not_allowed") from None
    cap = settings.limits.max_bytes
    try:
        async with asyncio.timeout(settings.fetch_timeout):
            async with (
                httpx2.AsyncClient(
                    transport=PinnedTransport(target), timeout=settings.fetch_timeout
                ) as client,
                client.stream("GET", url) as response,
            ):
                if response.status_code != 200:
                    raise invalid(
                        f"The image URL answered HTTP {response.status_code}.", code="image_fetch_failed"
                    )
                data = bytearray()
                async for chunk in response.aiter_bytes():
                    data += chunk
                    if len(data) > cap:
                        raise invalid(
                            f"The image at the URL is more than this server accepts ({cap} bytes).",
                            code="image_too_large",
                        )
                return bytes(data)
    except TimeoutError:
        raise invalid(
            f"The image URL did not answer within {settings.fetch_timeout:g} s.", code="image_fetch_failed"
        ) from None
    except httpx2.HTTPError as exc:
        raise invalid(f"The image URL could not be fetched ({exc}).", code="image_fetch_failed") from None
