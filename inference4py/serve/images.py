"""Images in requests: each API's image parts read at the edge, their bytes checked, web addresses fetched only when allowed.

The three text APIs carry images in their own shapes: OpenAI's chat ``image_url`` parts, the
Responses API's ``input_image`` parts and Anthropic's ``image`` blocks. Each protocol module turns
its part into an :class:`ImagePart` (where it is in the request, and a data URL's or a base64
block's bytes, or a web address); :func:`resolve_images` then gives every part its checked bytes,
and the messages reach the vision-language model as ``{"type": "image", "image": bytes}`` parts.

A server that fetches any address it is sent can be made to reach what only it can reach (a
request forgery): web addresses are refused unless their host is allowed (``serve
--allow-image-domain HOST``, :class:`ImagePolicy`), and a fetch is bounded in bytes and time and
follows no redirect to a host not allowed. Every refusal is an :class:`~inference4py.serve.protocol.ApiError`
400 naming the part (``messages[0].content[1]``), which each API shapes as its own error object.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import io
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from inference4py.serve.protocol import ApiError

__all__ = ["ImagePart", "ImagePolicy", "image_part", "resolve_images"]

_FORMATS = "PNG, JPEG, WebP, GIF or BMP"


@dataclass(frozen=True)
class ImagePolicy:
    """What the server accepts as an image.

    Attributes:
        allowed_domains: Hosts whose ``http(s)`` image addresses the server fetches (a name also
            allows its subdomains: ``example.com`` allows ``img.example.com``); empty: none, images
            come inline (data URLs, base64).
        max_bytes: The most bytes one image may have, inline or fetched.
        max_pixels: The most pixels one image may have once decoded (width x height).
        fetch_timeout: Seconds a fetch may take, from connecting to its last byte.
    """

    allowed_domains: tuple[str, ...] = ()
    max_bytes: int = 20 << 20
    max_pixels: int = 50_000_000
    fetch_timeout: float = 10.0

    def allows(self, host: str) -> bool:
        host = host.lower().rstrip(".")
        return any(host == d or host.endswith("." + d) for d in (d.lower().rstrip(".") for d in self.allowed_domains))


@dataclass(frozen=True)
class ImagePart:
    """An image of a request before its bytes are checked: ``data``, base64 data not yet decoded
    (``encoded``: decoded off the event loop), or a web address ``url``."""

    where: str  # its place in the request, for errors: "messages[0].content[1]"
    data: bytes | None = None
    encoded: str | None = None
    url: str | None = None


def image_part(value: Any, where: str) -> ImagePart:
    """An image given as a URL string (OpenAI's ``image_url``, the Responses API's ``input_image``):
    a ``data:`` URL's base64 data or an ``http(s)`` address, for :func:`resolve_images`.

    Raises:
        ApiError: 400, a value that is not a string, a data URL without base64 data, another scheme.
    """
    if not isinstance(value, str) or not value:
        raise ApiError(400, f"{where}: an image is given as a URL string (data:image/png;base64,... ).", where)
    if value.startswith("data:"):
        header, _, payload = value.partition(",")
        if not header.endswith(";base64") or not payload:
            raise ApiError(
                400,
                f"{where}: a data URL without base64 data ({header[:40]!r}): send data:image/png;base64,<data>.",
                where,
            )
        return ImagePart(where, encoded=payload)
    scheme = value.split(":", 1)[0].lower() if ":" in value else ""
    if scheme in ("http", "https"):
        return ImagePart(where, url=value)
    raise ApiError(
        400,
        f"{where}: images are data URLs (data:image/png;base64,...) or http(s) addresses, not {value[:40]!r}.",
        where,
    )


def _decode_base64(payload: str, where: str) -> bytes:
    """Base64 data (a data URL's or an Anthropic block's), decoded.

    Raises:
        ApiError: 400, not base64, or empty.
    """
    try:
        data = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ApiError(400, f"{where}: the image's base64 data is invalid ({exc}).", where) from exc
    if not data:
        raise ApiError(400, f"{where}: the image is empty (0 bytes).", where)
    return data


async def resolve_images(messages: Sequence[dict[str, Any]], policy: ImagePolicy) -> list[dict[str, Any]]:
    """``messages`` with each :class:`ImagePart` in their content replaced by its bytes, fetched when it is an
    address, and checked: no larger than the policy allows, and an image pillow reads.

    Raises:
        ApiError: 400 naming the part: an address whose host is not allowed, a fetch that fails, is
            too large or too slow, data that is no image, an image too large.
    """
    out = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, list) and any(isinstance(p.get("image"), ImagePart) for p in content):
            parts = []
            for part in content:
                image = part.get("image")
                if isinstance(image, ImagePart):
                    part = {"type": "image", "image": await _checked_bytes(image, policy)}
                parts.append(part)
            message = {**message, "content": parts}
        out.append(message)
    return out


async def _checked_bytes(part: ImagePart, policy: ImagePolicy) -> bytes:
    return await asyncio.to_thread(_checked, part, policy)  # decoding megabytes would hold up the event loop


def _checked(part: ImagePart, policy: ImagePolicy) -> bytes:
    """The part's bytes (decoded or fetched) once checked; on a worker thread."""
    if part.url is not None:
        data = _fetch(part, policy)
    elif part.encoded is not None:
        _check_size(len(part.encoded.rstrip("=")) * 3 // 4, part.where, policy)  # before decoding it
        data = _decode_base64(part.encoded, part.where)
    else:
        data = part.data or b""
    _check_size(len(data), part.where, policy)
    _check_image(data, part.where, policy.max_pixels)
    return data


def _check_size(size: int, where: str, policy: ImagePolicy) -> None:
    if size > policy.max_bytes:
        raise ApiError(
            400,
            f"{where}: the image has {size} bytes, more than this server's limit of {policy.max_bytes} "
            f"(serve --max-image-mb). Send a smaller image.",
            where,
        )


def _check_image(data: bytes, where: str, max_pixels: int) -> None:
    """Refuse bytes pillow does not recognise as an image, or an image of more than ``max_pixels``
    (read from its header: nothing is decoded here)."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)) as opened:
            width, height = opened.size
    except (UnidentifiedImageError, OSError, ValueError, Image.DecompressionBombError) as exc:
        raise ApiError(400, f"{where}: the data is not an image ({exc}). Send a {_FORMATS} image.", where) from exc
    if width * height > max_pixels:
        raise ApiError(
            400,
            f"{where}: the image is {width} x {height} pixels, more than this server's limit of {max_pixels} pixels. "
            "Send a smaller image.",
            where,
        )


class _AllowedRedirects(urllib.request.HTTPRedirectHandler):
    """Follows a redirect only to an http(s) address whose host the policy allows."""

    def __init__(self, policy: ImagePolicy, where: str) -> None:
        self.policy, self.where = policy, where

    def redirect_request(self, req: Any, fp: Any, code: int, msg: str, headers: Any, newurl: str) -> Any:
        target = urllib.parse.urlsplit(newurl)
        if target.scheme not in ("http", "https") or not self.policy.allows(target.hostname or ""):
            raise ApiError(
                400,
                f"{self.where}: the image address redirects to {target.hostname or newurl[:60]!r}, a host this "
                "server does not fetch images from.",
                self.where,
            )
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def _fetch(part: ImagePart, policy: ImagePolicy) -> bytes:
    """The bytes at ``part.url`` (on a worker thread), if its host is allowed, within the policy's bytes and time."""
    assert part.url is not None  # an inline part has its data
    where, url = part.where, part.url
    host = urllib.parse.urlsplit(url).hostname or ""
    if not policy.allowed_domains:
        raise ApiError(
            400,
            f"{where}: this server does not fetch image addresses ({url[:80]}): send the image inline as a data URL "
            "(data:image/png;base64,...), or start the server with --allow-image-domain HOST.",
            where,
        )
    if not policy.allows(host):
        raise ApiError(
            400,
            f"{where}: this server does not fetch images from {host!r} (allowed: "
            f"{', '.join(policy.allowed_domains)}). Send the image inline as a data URL.",
            where,
        )
    opener = urllib.request.build_opener(_AllowedRedirects(policy, where))
    request = urllib.request.Request(url, headers={"User-Agent": "inference4py", "Accept": "image/*"})
    deadline = time.monotonic() + policy.fetch_timeout
    try:
        with opener.open(request, timeout=policy.fetch_timeout) as response:
            declared = response.headers.get("Content-Length")
            if declared is not None and declared.isdigit() and int(declared) > policy.max_bytes:
                raise ApiError(
                    400,
                    f"{where}: the image at {url[:80]} has {declared} bytes, more than this server's limit of "
                    f"{policy.max_bytes} (serve --max-image-mb).",
                    where,
                )
            data = bytearray()
            while len(data) <= policy.max_bytes:  # one byte over the limit is enough to refuse it
                piece = response.read1(min(1 << 16, policy.max_bytes + 1 - len(data)))  # what has come
                if not piece:
                    break
                data += piece
                if time.monotonic() > deadline:  # each read has the timeout; together too
                    raise ApiError(
                        400,
                        f"{where}: fetching the image at {url[:80]} took more than {policy.fetch_timeout:g} s.",
                        where,
                    )
    except ApiError:
        raise
    except urllib.error.HTTPError as exc:
        raise ApiError(400, f"{where}: fetching the image at {url[:80]} failed: HTTP {exc.code}.", where) from exc
    except (urllib.error.URLError, OSError, ValueError) as exc:
        why = getattr(exc, "reason", exc)
        raise ApiError(400, f"{where}: fetching the image at {url[:80]} failed ({why}).", where) from exc
    return bytes(data)
