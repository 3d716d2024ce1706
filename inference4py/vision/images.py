"""One image of any accepted form -> an RGB PIL image."""

from __future__ import annotations

import base64
import binascii
import io
import os
from pathlib import Path
from typing import Any

import numpy as np

from inference4py.errors import InvalidInputError

__all__ = ["ImageInput", "image_source", "load_image"]

ImageInput = str | os.PathLike[str] | bytes | bytearray | Any  # Any: a PIL image or an HxWx3 uint8 array


def image_source(item: ImageInput, index: int = 0) -> Any:
    """``item`` as encoded bytes or a PIL image, before any decoding: a data URL's payload or a file's
    content become bytes, a uint8 array a PIL image; a web address, a missing file, empty bytes,
    a malformed array or another type are refused.

    Raises:
        InvalidInputError: as :func:`load_image`, for everything but undecodable bytes.
    """
    from PIL import Image

    n = index + 1
    if isinstance(item, str) and item.startswith("data:"):  # a data URL (OpenAI's image_url form)
        header, _, payload = item.partition(",")
        if not header.endswith(";base64") or not payload:
            raise InvalidInputError(
                f"Image {n} is a data URL without base64 data ({header[:40]!r}): use data:image/png;base64,<data>."
            )
        try:
            item = base64.b64decode(payload, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise InvalidInputError(f"Image {n}: the data URL's base64 data is invalid ({exc}).") from exc
    if isinstance(item, str) and item.startswith(("http://", "https://")):
        raise InvalidInputError(
            f"Image {n} is a web address ({item[:80]}): inference4py does not download images. Fetch it first "
            "and pass the file path, the bytes or a PIL image."
        )
    if isinstance(item, (str, os.PathLike)):
        path = Path(item)
        if not path.is_file():
            raise InvalidInputError(f"Image file {path} does not exist. Check the path.")
        item = path.read_bytes()
    if isinstance(item, np.ndarray):
        if item.dtype != np.uint8 or item.ndim != 3 or item.shape[2] not in (3, 4):
            raise InvalidInputError(
                f"Image {n}: arrays must be H x W x 3 (or 4) uint8, got {item.dtype} {item.shape}. "
                "Convert it with np.asarray(image, dtype=np.uint8)."
            )
        return Image.fromarray(item)
    if isinstance(item, (bytes, bytearray, memoryview)):
        data = bytes(item)
        if not data:
            raise InvalidInputError(f"Image {n} is empty (0 bytes). Pass a PNG, JPEG, WebP, GIF or BMP image.")
        return data
    if isinstance(item, Image.Image):
        return item
    raise InvalidInputError(
        f"Image {n} has unsupported type {type(item).__name__}: pass a path, bytes, a PIL image or a uint8 array."
    )


def load_image(item: ImageInput, index: int = 0) -> Any:
    """``item`` as an RGB ``PIL.Image.Image``, fully decoded.

    Args:
        item: a file path, a ``data:image/...;base64,`` URL, encoded bytes (PNG, JPEG, WebP, ...),
            a PIL image or an ``H x W x 3`` (or 4) uint8 array.
        index: the image's position in the call, for messages (from 0).

    Raises:
        InvalidInputError: a missing file, undecodable bytes, an unsupported type or array.
    """
    from PIL import Image, UnidentifiedImageError

    source = image_source(item, index)
    if isinstance(source, bytes):
        try:
            with Image.open(io.BytesIO(source)) as opened:
                opened.load()  # a full decode: truncated files fail here
                return opened.convert("RGB")
        except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as exc:
            raise InvalidInputError(
                f"Image {index + 1} cannot be decoded ({exc}). Pass a PNG, JPEG, WebP, GIF or BMP image."
            ) from exc
    return source.convert("RGB")
