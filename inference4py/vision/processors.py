"""Image preprocessing with pillow + numpy, configured by the model folder.

Two families are read:

- transformers' ``preprocessor_config.json`` of CLIP / SigLIP-style processors (LLaVA, and the
  vision towers of many onnx-community exports): resize (shortest edge or a fixed size, with the
  config's resample filter), center crop, rescale, normalize -> ``pixel_values``
  ``[images, 3, H, W]``.  Resizing is pillow's, as in transformers, so the pixels are the same.
- onnxruntime-genai's ``processor_config.json`` with a ``Phi3ImageTransform`` (Phi-3 / 3.5 vision):
  the HD transform -- the image scaled to a grid of 336 px crops (at most ``num_crops``), padded
  with white, normalized, a 336 px global view first, zero crops to ``num_crops + 1`` ->
  ``pixel_values`` ``[images, crops + 1, 3, 336, 336]`` and ``image_sizes`` ``[images, 2]``.

Each processor also says how many image tokens each image takes in the prompt.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from inference4py.errors import UnsupportedModelError

__all__ = [
    "ImageBatch",
    "ImageProcessor",
    "ClipImageProcessor",
    "Phi3ImageProcessor",
    "Idefics3ImageProcessor",
    "load_image_processor",
    "SUPPORTED_PROCESSORS",
    "read_json",
]

CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)
_CLIP_LIKE = ("CLIPImageProcessor", "SiglipImageProcessor")
_COUNT_KEYS = ("image_seq_length", "num_image_tokens", "image_seq_len")
SUPPORTED_PROCESSORS = (
    *_CLIP_LIKE,
    "Idefics3ImageProcessor",
    "Phi3ImageTransform (onnxruntime-genai processor_config.json)",
)


@dataclass(frozen=True)
class ImageBatch:
    """The vision encoder's inputs for a call's images, and each image's token count in the prompt."""

    inputs: dict[str, np.ndarray]  # "pixel_values" (+ "image_sizes" / "pixel_attention_mask")
    tokens: tuple[int, ...]  # image tokens per image, in order
    # What each image's placeholder becomes in the prompt when it is more than its image tokens
    # (Idefics3: frame markers around each frame's tokens); empty: the image token, tokens[i] times.
    texts: tuple[str, ...] = ()


class ImageProcessor(Protocol):
    """Images (RGB PIL) -> :class:`ImageBatch`."""

    def __call__(self, images: Sequence[Any]) -> ImageBatch: ...


def _pair(size: Any, default: int) -> tuple[int, int]:
    """(height, width) of a transformers size entry (int, {"height", "width"} or {"shortest_edge"})."""
    if isinstance(size, int):
        return size, size
    if isinstance(size, Mapping) and "height" in size and "width" in size:
        return int(size["height"]), int(size["width"])
    return default, default


class ClipImageProcessor:
    """CLIP / SigLIP-style preprocessing (transformers' CLIPImageProcessor semantics).

    Args:
        config: the preprocessor_config.json mapping.
        tokens_per_image: image tokens each image becomes in the prompt (None: from the pixel size
            and ``patch_size`` / ``num_additional_image_tokens`` / ``vision_feature_select_strategy``).
        patch_size, extra_tokens: see ``tokens_per_image``.
    """

    def __init__(
        self,
        config: Mapping[str, Any],
        *,
        tokens_per_image: int | None = None,
        patch_size: int | None = None,
        extra_tokens: int = 0,
    ) -> None:
        self.config = dict(config)
        c = self.config
        size = c.get("size", {"shortest_edge": 224})
        self.shortest_edge = (
            int(size["shortest_edge"]) if isinstance(size, Mapping) and "shortest_edge" in size else None
        )
        self.size = _pair(size, 224)
        self.do_resize = bool(c.get("do_resize", True))
        self.resample = int(c.get("resample", 3))  # PIL.Image.BICUBIC
        self.do_center_crop = bool(c.get("do_center_crop", False))
        self.crop = _pair(c.get("crop_size", self.size), self.size[0])
        self.do_rescale = bool(c.get("do_rescale", True))
        self.rescale = float(c.get("rescale_factor", 1 / 255))
        self.do_normalize = bool(c.get("do_normalize", True))
        self.mean = np.asarray(c.get("image_mean", CLIP_MEAN), dtype=np.float32).reshape(3, 1, 1)
        self.std = np.asarray(c.get("image_std", CLIP_STD), dtype=np.float32).reshape(3, 1, 1)
        self._tokens = tokens_per_image
        self._patch = patch_size
        self._extra = extra_tokens

    def __repr__(self) -> str:
        return f"ClipImageProcessor(size={self.shortest_edge or self.size}, crop={self.crop if self.do_center_crop else None})"

    def _resize(self, image: Any) -> Any:
        w, h = image.size
        if self.shortest_edge is not None:
            short, long = (w, h) if w <= h else (h, w)
            new_short, new_long = self.shortest_edge, int(self.shortest_edge * long / short)
            new_w, new_h = (new_short, new_long) if w <= h else (new_long, new_short)
        else:
            new_h, new_w = self.size
        return image.resize((new_w, new_h), resample=self.resample)

    def _center_crop(self, pixels: np.ndarray) -> np.ndarray:
        """[H, W, 3] -> [crop_h, crop_w, 3]; padded with zeros where the image is smaller (as transformers)."""
        ch, cw = self.crop
        h, w = pixels.shape[:2]
        if h < ch or w < cw:
            padded = np.zeros((max(h, ch), max(w, cw), 3), dtype=pixels.dtype)
            top, left = (padded.shape[0] - h) // 2, (padded.shape[1] - w) // 2
            padded[top : top + h, left : left + w] = pixels
            pixels, h, w = padded, padded.shape[0], padded.shape[1]
        top, left = int((h - ch) / 2), int((w - cw) / 2)
        return pixels[top : top + ch, left : left + cw]

    def pixels(self, image: Any) -> np.ndarray:
        """One RGB PIL image -> ``[3, H, W]`` float32."""
        if self.do_resize:
            image = self._resize(image)
        arr = np.asarray(image, dtype=np.uint8)
        if self.do_center_crop:
            arr = self._center_crop(arr)
        out = arr.astype(np.float64)
        if self.do_rescale:
            out = out * self.rescale
        out = out.astype(np.float32).transpose(2, 0, 1)  # [3, H, W]
        if self.do_normalize:
            out = (out - self.mean) / self.std
        return np.ascontiguousarray(out, dtype=np.float32)

    def tokens_for(self, height: int, width: int) -> int:
        if self._tokens is not None:
            return self._tokens
        if not self._patch:
            raise UnsupportedModelError(
                "The image processor does not say how many image tokens an image takes: add image_seq_length "
                "(or patch_size) to processor_config.json."
            )
        return (height // self._patch) * (width // self._patch) + self._extra

    def __call__(self, images: Sequence[Any]) -> ImageBatch:
        pixels = np.stack([self.pixels(im) for im in images]) if images else np.zeros((0, 3, *self.crop), np.float32)
        h, w = pixels.shape[-2:]
        return ImageBatch({"pixel_values": pixels}, tuple(self.tokens_for(h, w) for _ in images))


class Phi3ImageProcessor:
    """Phi-3-vision's HD transform, as onnxruntime-genai's ``Phi3ImageTransform`` does it."""

    CROP = 336

    def __init__(self, *, num_crops: int = 16, num_img_tokens: int = 144) -> None:
        self.num_crops = int(num_crops)
        self.num_img_tokens = int(num_img_tokens)
        self.row_tokens = math.isqrt(self.num_img_tokens)  # one newline token per row of crop tokens
        self.mean = np.asarray(CLIP_MEAN, dtype=np.float32).reshape(3, 1, 1)
        self.std = np.asarray(CLIP_STD, dtype=np.float32).reshape(3, 1, 1)

    def __repr__(self) -> str:
        return f"Phi3ImageProcessor(num_crops={self.num_crops}, num_img_tokens={self.num_img_tokens})"

    def _hd(self, image: Any) -> Any:
        """Scale onto a grid of 336 px crops (at most num_crops), then pad the height with white."""
        from PIL import Image

        w, h = image.size
        transposed = w < h
        if transposed:
            image = image.transpose(Image.Transpose.TRANSPOSE)
            w, h = h, w
        ratio = w / h
        scale = 1
        while scale * math.ceil(scale / ratio) <= self.num_crops:
            scale += 1
        scale -= 1
        new_w = scale * self.CROP
        new_h = int(new_w / ratio)
        image = image.resize((new_w, new_h), resample=Image.Resampling.BILINEAR)
        target = math.ceil(new_h / self.CROP) * self.CROP
        top = (target - new_h) // 2
        canvas = Image.new("RGB", (new_w, target), (255, 255, 255))
        canvas.paste(image, (0, top))
        if transposed:
            canvas = canvas.transpose(Image.Transpose.TRANSPOSE)
        return canvas

    def _normalize(self, image: Any) -> np.ndarray:
        arr = np.asarray(image, dtype=np.float32).transpose(2, 0, 1) / 255.0
        return ((arr - self.mean) / self.std).astype(np.float32)  # [3, H, W]

    def tokens_for(self, height: int, width: int) -> int:
        rows, cols = height // self.CROP, width // self.CROP
        return (rows * cols + 1) * self.num_img_tokens + 1 + (rows + 1) * self.row_tokens

    def __call__(self, images: Sequence[Any]) -> ImageBatch:
        from PIL import Image

        c = self.CROP
        pixels = np.zeros((len(images), self.num_crops + 1, 3, c, c), dtype=np.float32)
        sizes = np.zeros((len(images), 2), dtype=np.int64)
        for i, image in enumerate(images):
            hd = self._hd(image)
            w, h = hd.size
            pixels[i, 0] = self._normalize(hd.resize((c, c), resample=Image.Resampling.BICUBIC))  # global view
            full = self._normalize(hd)  # [3, h, w]
            crops = full.reshape(3, h // c, c, w // c, c).transpose(1, 3, 0, 2, 4).reshape(-1, 3, c, c)
            pixels[i, 1 : 1 + len(crops)] = crops[: self.num_crops]
            sizes[i] = (h, w)
        tokens = tuple(self.tokens_for(int(h), int(w)) for h, w in sizes)
        return ImageBatch({"pixel_values": pixels, "image_sizes": sizes}, tokens)


class Idefics3ImageProcessor:
    """Idefics3 / SmolVLM preprocessing (transformers' Idefics3ImageProcessor semantics).

    The image's longest edge is resized to ``size.longest_edge`` (even sides), then, with image
    splitting, to multiples of the frame size (``max_image_size.longest_edge``) and cut into a grid
    of frames, row by row, followed by the whole image resized to one frame; without splitting it
    becomes one square frame.  Frames are rescaled and normalized -> ``pixel_values``
    ``[1, frames, 3, F, F]`` and ``pixel_attention_mask`` ``[1, frames, F, F]`` (every pixel real).
    Each image's placeholder becomes, per frame, ``<fake_token_around_image><row_r_col_c>`` and
    ``image_seq_len`` image tokens, then the global frame's ``<global-img>`` tokens.
    """

    _MAX_SIDE = 4096  # transformers' MAX_IMAGE_SIZE

    def __init__(
        self,
        config: Mapping[str, Any],
        *,
        seq_len: int,
        image_token: str = "<image>",
        fake_token: str = "<fake_token_around_image>",
        global_token: str = "<global-img>",
    ) -> None:
        c = dict(config)
        self.config = c
        self.longest = int(c.get("size", {}).get("longest_edge", 4 * 364))
        self.frame = int(c.get("max_image_size", {}).get("longest_edge", 364))
        self.do_resize = bool(c.get("do_resize", True))
        self.split = bool(c.get("do_image_splitting", True))
        self.resample = int(c.get("resample", 1))  # PIL.Image.LANCZOS
        self.do_rescale = bool(c.get("do_rescale", True))
        self.rescale = float(c.get("rescale_factor", 1 / 255))
        self.do_normalize = bool(c.get("do_normalize", True))
        self.mean = np.asarray(c.get("image_mean", (0.5, 0.5, 0.5)), dtype=np.float32).reshape(3, 1, 1)
        self.std = np.asarray(c.get("image_std", (0.5, 0.5, 0.5)), dtype=np.float32).reshape(3, 1, 1)
        self.seq_len = int(seq_len)
        self.image_token, self.fake_token, self.global_token = image_token, fake_token, global_token

    def __repr__(self) -> str:
        return f"Idefics3ImageProcessor(longest_edge={self.longest}, frame={self.frame}, splitting={self.split})"

    def _longest_edge(self, image: Any) -> Any:
        w, h = image.size
        aspect = w / h
        if w >= h:
            w, h = self.longest, int(self.longest / aspect)
            h += h % 2
        else:
            h, w = self.longest, int(self.longest * aspect)
            w += w % 2
        h, w = max(h, 1), max(w, 1)
        aspect = w / h
        if w >= h and w > self._MAX_SIDE:
            w, h = self._MAX_SIDE, int(self._MAX_SIDE / aspect)
        elif h > w and h > self._MAX_SIDE:
            h, w = self._MAX_SIDE, int(self._MAX_SIDE * aspect)
        return image.resize((max(w, 1), max(h, 1)), resample=self.resample)

    def _frames(self, image: Any) -> tuple[list[Any], int, int]:
        """(frames as PIL images, rows, cols); rows = cols = 0 when the image is one frame."""
        f = self.frame
        if not self.split:
            return [image.resize((f, f), resample=self.resample)], 0, 0
        w, h = image.size
        aspect = w / h
        if w >= h:
            w = math.ceil(w / f) * f
            h = math.ceil(int(w / aspect) / f) * f
        else:
            h = math.ceil(h / f) * f
            w = math.ceil(int(h * aspect) / f) * f
        image = image.resize((w, h), resample=self.resample)
        if h <= f and w <= f:
            return [image], 0, 0
        rows, cols = math.ceil(h / f), math.ceil(w / f)
        th, tw = math.ceil(h / rows), math.ceil(w / cols)
        frames = [
            image.crop((c * tw, r * th, min((c + 1) * tw, w), min((r + 1) * th, h)))
            for r in range(rows)
            for c in range(cols)
        ]
        frames.append(image.resize((f, f), resample=self.resample))
        return frames, rows, cols

    def _pixels(self, frame: Any) -> np.ndarray:
        out = np.asarray(frame, dtype=np.uint8).astype(np.float64)
        if self.do_rescale:
            out = out * self.rescale
        arr = out.astype(np.float32).transpose(2, 0, 1)  # [3, F, F]
        if self.do_normalize:
            arr = (arr - self.mean) / self.std
        return arr.astype(np.float32)

    def _text(self, rows: int, cols: int) -> str:
        tokens = self.image_token * self.seq_len
        whole = f"{self.fake_token}{self.global_token}{tokens}{self.fake_token}"
        if rows == 0 and cols == 0:
            return whole
        grid = "".join(
            "".join(f"{self.fake_token}<row_{r + 1}_col_{c + 1}>{tokens}" for c in range(cols)) + "\n"
            for r in range(rows)
        )
        return f"{grid}\n{whole}"

    def __call__(self, images: Sequence[Any]) -> ImageBatch:
        frames: list[np.ndarray] = []
        texts, tokens = [], []
        for image in images:
            if self.do_resize:
                image = self._longest_edge(image)
            parts, rows, cols = self._frames(image)
            frames += [self._pixels(p) for p in parts]
            texts.append(self._text(rows, cols))
            tokens.append(len(parts) * self.seq_len)
        f = self.frame
        pixels = np.stack(frames)[None] if frames else np.zeros((1, 0, 3, f, f), np.float32)
        mask = np.ones((1, pixels.shape[1], *pixels.shape[-2:]), dtype=bool)
        return ImageBatch({"pixel_values": pixels, "pixel_attention_mask": mask}, tuple(tokens), tuple(texts))


def read_json(path: Path) -> dict[str, Any]:
    """A model file's JSON object ({} for another JSON value).

    Raises:
        UnsupportedModelError: the file cannot be read or is not JSON.
    """
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UnsupportedModelError(f"{path} is not readable JSON ({exc}). Re-download the model.") from exc
    return data if isinstance(data, dict) else {}


def _genai_processor(path: Path) -> ImageProcessor:
    ops = [t.get("operation", {}) for t in read_json(path).get("processor", {}).get("transforms", [])]
    for op in ops:
        if op.get("type") == "Phi3ImageTransform":
            attrs = op.get("attrs", {})
            return Phi3ImageProcessor(
                num_crops=int(attrs.get("num_crops", 16)), num_img_tokens=int(attrs.get("num_img_tokens", 144))
            )
    kinds = [str(op.get("type")) for op in ops]
    raise UnsupportedModelError(
        f"{path} describes image transforms {kinds}, which inference4py does not run natively (supported: "
        f"{', '.join(SUPPORTED_PROCESSORS)}). Run the folder with inference4py_genai.VisionLanguageModel instead."
    )


def load_image_processor(folder: str | Path) -> ImageProcessor:
    """The image processor a model folder describes.

    Reads ``preprocessor_config.json`` (transformers; image tokens per image from
    ``processor_config.json`` / ``config.json``), else onnxruntime-genai's ``processor_config.json``.

    Raises:
        UnsupportedModelError: no image-processor configuration, or a processor type not supported natively.
    """
    folder = Path(folder)
    pre = folder / "preprocessor_config.json"
    if pre.is_file():
        config = read_json(pre)
        kind = str(config.get("image_processor_type") or "").removesuffix("Fast")
        proc = read_json(folder / "processor_config.json") if (folder / "processor_config.json").is_file() else {}
        if kind == "Idefics3ImageProcessor":
            seq = proc.get("image_seq_len", config.get("image_seq_len"))
            if not isinstance(seq, int):
                raise UnsupportedModelError(
                    f"{folder} uses Idefics3ImageProcessor but processor_config.json has no image_seq_len (image "
                    "tokens per frame): copy the processor_config.json that came with the model."
                )
            return Idefics3ImageProcessor(config, seq_len=seq)
        if kind not in _CLIP_LIKE:
            raise UnsupportedModelError(
                f"{pre} asks for image processor {kind or '(none named)'!r}, which inference4py does not run "
                f"natively (supported: {', '.join(SUPPORTED_PROCESSORS)}). Export the model with one of those, or "
                "run it with inference4py_genai.VisionLanguageModel if it is an onnxruntime-genai folder."
            )
        model = read_json(folder / "config.json") if (folder / "config.json").is_file() else {}
        # transformers' processors: a fixed count, else one per patch (LLaVA); config.json's count is the last resort
        # (LlavaConfig carries image_seq_length=576 whatever the vision tower).
        processor = {**config, **proc}
        fixed = next((processor[k] for k in _COUNT_KEYS if processor.get(k)), None)
        vision_config = model.get("vision_config")
        vision: dict[str, Any] = vision_config if isinstance(vision_config, dict) else {}
        patch = processor.get("patch_size") or vision.get("patch_size")
        if fixed is None and not patch:
            fixed = next((model[k] for k in _COUNT_KEYS if model.get(k)), None)
        strategy = processor.get("vision_feature_select_strategy") or model.get("vision_feature_select_strategy")
        extra = int(processor.get("num_additional_image_tokens", 0)) - (1 if strategy == "default" else 0)
        return ClipImageProcessor(
            config,
            tokens_per_image=int(fixed) if fixed else None,
            patch_size=int(patch) if patch else None,
            extra_tokens=extra,
        )
    genai = folder / "processor_config.json"
    if genai.is_file() and "processor" in read_json(genai):
        return _genai_processor(genai)
    raise UnsupportedModelError(
        f"{folder} has no image-processor configuration (preprocessor_config.json, or onnxruntime-genai's "
        "processor_config.json): copy the one that came with the model into the folder."
    )
