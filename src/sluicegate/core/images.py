"""Images a request carries, decoded once into pixels within the server's limits.

An engine that reads pixels itself (llama.cpp with a projector) gets each image part's
`picture` filled in before it sees the request (the turn runner does it, `turn/images.py`);
an engine that passes images on (an upstream) gets the URL as the client sent it. Every
failure here is a 400: too many images, too many bytes or pixels, not an image at all.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import io
from dataclasses import dataclass

from sluicegate.core.errors import invalid

FORMATS = frozenset({"PNG", "JPEG", "WEBP", "GIF"})
MIB = 1 << 20


@dataclass(frozen=True, slots=True)
class ImageLimits:
    """`[server]` max_image_bytes, max_image_pixels, max_images_per_request, max_request_pixels."""

    max_bytes: int = 16 * MIB
    max_pixels: int = 32_000_000
    max_images: int = 16
    max_request_pixels: int = 100_000_000  # all of one request's images: 3 bytes each decoded


@dataclass(frozen=True, slots=True)
class Picture:
    width: int
    height: int
    rgb: bytes  # width * height * 3 bytes, row by row
    digest: str  # SHA-256 of the encoded image (hex): what identifies it in a KV cache


def data_url_bytes(url: str) -> bytes:
    """The bytes of a `data:` URL (base64 or percent-encoded); a 400 when malformed."""
    head, comma, payload = url.partition(",")
    if not comma or not head.startswith("data:"):
        raise invalid(
            "Invalid image: a data URL needs the form data:<type>;base64,<data>.", code="invalid_image"
        )
    if head.endswith(";base64"):
        try:
            return base64.b64decode(payload, validate=True)
        except (binascii.Error, ValueError):
            raise invalid(
                "Invalid image: the data URL's base64 data is malformed.", code="invalid_image"
            ) from None
    from urllib.parse import unquote_to_bytes

    return unquote_to_bytes(payload)


def check_size(data: bytes, limits: ImageLimits) -> None:
    if len(data) > limits.max_bytes:
        raise invalid(
            f"An image is {len(data)} bytes, more than this server accepts ({limits.max_bytes}).",
            code="image_too_large",
        )


def decode_images(encoded: list[bytes], limits: ImageLimits, decoded_pixels: int = 0) -> list[Picture]:
    """One request's images (besides `decoded_pixels` decoded already), decoded; every size read
    from its header first, so the request's pixels are refused (`max_request_pixels`) before any
    of them is decoded."""
    total = decoded_pixels + sum(image_pixels(data, limits) for data in encoded)
    if total > limits.max_request_pixels:
        raise invalid(
            f"The request's images are {total} pixels in all, more than this server accepts in one "
            f"request ({limits.max_request_pixels} pixels).",
            code="image_too_large",
        )
    return [decode_image(data, limits) for data in encoded]


def image_pixels(data: bytes, limits: ImageLimits) -> int:
    """An image's width x height by its header (nothing decoded); a 400 when it is no image."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)) as image:
            width, height = image.size
    except (UnidentifiedImageError, OSError, ValueError, EOFError, SyntaxError, Image.DecompressionBombError):
        raise invalid(
            "Invalid image: the data could not be decoded as an image.", code="invalid_image"
        ) from None
    return int(width * height)


def decode_image(data: bytes, limits: ImageLimits) -> Picture:
    """PNG, JPEG, WebP or GIF (its first frame) as RGB pixels. The size is read from the header
    first, so an image with too many pixels is refused before it is decoded."""
    from PIL import Image, UnidentifiedImageError  # Pillow only where images are decoded

    check_size(data, limits)
    try:
        with Image.open(io.BytesIO(data)) as image:
            if image.format not in FORMATS:
                raise invalid(
                    f"Unsupported image format {image.format or 'unknown'}; send PNG, JPEG, WebP or GIF.",
                    code="invalid_image",
                )
            width, height = image.size
            if width * height > limits.max_pixels:
                raise invalid(
                    f"An image is {width}x{height} pixels, more than this server accepts "
                    f"({limits.max_pixels} pixels).",
                    code="image_too_large",
                )
            image.seek(0)  # a GIF's (or animated WebP's) first frame
            rgb = image.convert("RGB")
            pixels = rgb.tobytes()
    except (UnidentifiedImageError, OSError, ValueError, EOFError, SyntaxError, Image.DecompressionBombError):
        raise invalid(
            "Invalid image: the data could not be decoded as an image.", code="invalid_image"
        ) from None
    return Picture(width, height, pixels, hashlib.sha256(data).hexdigest())
