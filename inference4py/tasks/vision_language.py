"""VisionLanguageModel: text about images on the native loop (vision encoder + embedding + decoder).

Two folder layouts are found from the files: onnxruntime-genai's (``genai_config.json`` with
``vision`` and ``embedding`` sections, e.g. Phi-3-vision: vision.onnx, embedding.onnx, the decoder)
and the optimum / onnx-community parts (``vision_encoder.onnx``, ``embed_tokens.onnx``,
``decoder_model_merged.onnx``, possibly under ``onnx/``); :mod:`inference4py.vision.runtime` runs
them.  Images are preprocessed with pillow + numpy as the folder's processor configuration says
(:mod:`inference4py.vision`); each image's placeholder in the prompt becomes as many image tokens
as the processor counts for it.  The token loop, processors, samplers, stop sequences and
streaming are the text generator's.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from inference4py.engine.pipeline import PipelineSpec
from inference4py.engine.sessions import SessionOptions
from inference4py.errors import ConfigurationError, InvalidInputError, PromptTooLongError
from inference4py.generation.config import GenerationConfig
from inference4py.generation.generate import collect, generate_chunks
from inference4py.generation.result import GenerationChunk, GenerationResult
from inference4py.tasks.base import GenerationBuilder, renamed
from inference4py.tasks.loader import GenerativeTask
from inference4py.tasks.options import RequestOptions
from inference4py.tasks.presets import Preset, PresetTable
from inference4py.tasks.prompts import ChatOptions, PromptEncoder
from inference4py.vision import ImageBatch, ImageInput, load_image, load_image_processor
from inference4py.vision.runtime import VisionPipeline, find_layout, read_json

__all__ = ["VISION_PRESETS", "VisionLanguageModel", "VisionLanguageBuilder", "VisionPrompt", "VisionRequest"]

Message = Mapping[str, Any]
VisionPrompt = str | Sequence[Message]
Images = ImageInput | Sequence[ImageInput] | None


@dataclass(frozen=True)
class VisionRequest:
    """One request prepared (images decoded and preprocessed, prompt expanded, config decided), not yet run.

    :meth:`VisionLanguageModel.prepare` makes it wherever the request arrives (a server's handler
    thread); :meth:`VisionLanguageModel.stream_chunks` runs it (the vision encoder, then the token loop).
    """

    ids: list[int]  # the prompt as the token loop holds it (image positions as the image token id)
    model_ids: np.ndarray  # [1, n]: as the model reads it (genai: -k for image k)
    image_mask: np.ndarray  # [n]: True at image tokens
    images: ImageBatch
    config: GenerationConfig

    @property
    def prompt_tokens(self) -> int:
        """The prompt's tokens, the images' included."""
        return len(self.ids)


# --------------------------------------------------------------------------- the task
class VisionLanguageBuilder(ChatOptions, GenerationBuilder["VisionLanguageModel"]):
    """Options of a :class:`VisionLanguageModel` (GenerationBuilder's, and the chat options)."""

    def __init__(
        self,
        *,
        preset: str | None = None,
        model_id: str | None = None,
        chat_template: str | None = None,
        use_chat_template: bool = True,
    ) -> None:
        super().__init__(preset=preset, model_id=model_id)
        self._init_chat(chat_template, use_chat_template)


#: VisionLanguageModel's presets: the method name (inference4j's), the Hub repo (the chat template is the folder's).
VISION_PRESETS = PresetTable(
    VisionLanguageBuilder,
    [
        Preset(
            "phi3Vision",
            "inference4j/phi-3.5-vision-instruct",
            "Phi-3.5 Vision Instruct (4.2B), inference4j/phi-3.5-vision-instruct (an onnxruntime-genai folder).",
        ),
    ],
)


class VisionLanguageModel(GenerativeTask[VisionPipeline]):
    """Answer prompts about images with an ONNX vision-language model, on inference4py's own loop.

    Example:
        >>> vlm = VisionLanguageModel.builder().model_path("tests/fixtures/models/llava-tiny").build()
        >>> result = vlm.generate("tests/fixtures/models/llava-tiny/images/sea.png", "Describe this image.",
        ...                       max_new_tokens=4)
        >>> len(result.token_ids)
        4
    """

    Builder = VisionLanguageBuilder
    builder = VISION_PRESETS.blank()
    phi3Vision = VISION_PRESETS.method("phi3Vision")  # inference4j's name

    def __init__(self, folder: Path, builder: VisionLanguageBuilder) -> None:
        super().__init__(folder, builder)  # the loader's steps (tasks/loader.py)
        self._prompts = PromptEncoder(self.tokenizer, self.folder, builder, self._runtime.vocab_size)
        self._list_content = self._template_takes_parts()

    # ------------------------------------------------------------------ what the loader asks
    def _load_pipeline(self) -> PipelineSpec | None:
        return None  # the layout is found from the files (find_layout), with the tokenizer

    def _model_config(self) -> dict[str, Any]:
        return read_json(self.folder / "config.json") if (self.folder / "config.json").is_file() else {}

    def _open_runtime(
        self, spec: PipelineSpec | None, config: dict[str, Any], options: SessionOptions
    ) -> VisionPipeline:
        self._layout = find_layout(self.folder, self.tokenizer)
        self.image_processor = load_image_processor(self.folder)
        return VisionPipeline(self._layout, self.folder, {**config, **_text_config(config)}, options)

    def _adjust_defaults(self, defaults: GenerationConfig, config: dict[str, Any]) -> GenerationConfig:
        genai = {k: v for k, v in self._layout.defaults.items() if k.endswith("token_id")}
        if not genai:
            return defaults
        eos = genai.get("eos_token_id")
        genai["eos_token_id"] = tuple(eos) if isinstance(eos, list) else eos
        return defaults.replace(**genai)

    def _context(self, config: dict[str, Any]) -> int | None:
        context: int | None = self._layout.defaults.get("context") or next(
            (
                c.get("max_position_embeddings")
                for c in (_text_config(config), config)
                if c.get("max_position_embeddings")
            ),
            None,
        )
        return context

    @property
    def layout(self) -> str:
        """``"genai"`` or ``"optimum"``: which folder layout was found."""
        return self._layout.kind

    def _repr_fields(self) -> str:
        return f"layout={self.layout!r}, "

    # ------------------------------------------------------------------ prompts
    def _template_takes_parts(self) -> bool:
        """Whether the chat template renders content parts (``[{"type": "text", ...}]``) itself."""
        template = self._prompts.template
        if not template:
            return False
        probe = [{"role": "user", "content": [{"type": "text", "text": "\x00probe"}]}]
        try:
            text = self.tokenizer.apply_chat_template(probe, add_generation_prompt=True, template=template)
        except Exception:  # a template that cannot iterate parts: give it strings
            return False
        return "\x00probe" in text and "'type'" not in text

    def _tag(self, n: int) -> str:
        return self._layout.image_token.replace("{n}", str(n))

    def _has_placeholder(self, text: str) -> bool:
        if self._layout.kind == "genai":
            return re.search(r"<\|image_\d+\|>", text) is not None
        return self._layout.image_token in text

    def _messages(self, prompt: VisionPrompt, images: Images) -> tuple[list[dict[str, Any]], list[Any]]:
        """Chat messages with image parts, and the images in prompt order (not yet loaded).

        Images passed apart from the prompt fill the placeholders the text already has
        (``"Compare <image> with <image>"``); when it has none, they go first in the first user message.
        """
        given = [] if images is None else list(images) if isinstance(images, (list, tuple)) else [images]
        if isinstance(prompt, str):
            if not prompt.strip() and not given:
                raise InvalidInputError("The prompt is empty and there is no image. Pass some text or an image.")
            if self._has_placeholder(prompt):  # "Compare <image> with <image>": the images fill those
                return [{"role": "user", "content": prompt}], given
            parts = [{"type": "image"} for _ in given] + [{"type": "text", "text": prompt}]
            return [{"role": "user", "content": parts}], given
        if not isinstance(prompt, (list, tuple)) or not prompt or not all(isinstance(m, Mapping) for m in prompt):
            raise InvalidInputError(
                f"Unsupported prompt of type {type(prompt).__name__}: pass a str or a list of "
                "{'role': ..., 'content': ...} messages (content: text, or parts such as "
                "{'type': 'image', 'image': path} and {'type': 'text', 'text': ...})."
            )
        messages: list[dict[str, Any]] = []
        found: list[Any] = []
        for m in prompt:
            content = m.get("content", "")
            if isinstance(content, (list, tuple)):
                parts = []
                for part in content:
                    kind = part.get("type") if isinstance(part, Mapping) else None
                    if kind in ("image", "image_url"):
                        value = part.get("image", part.get("image_url"))
                        if isinstance(value, Mapping):  # OpenAI's {"type": "image_url", "image_url": {"url": ...}}
                            value = value.get("url")
                        found.append(value)
                        parts.append({"type": "image"})
                    elif kind == "text":
                        parts.append({"type": "text", "text": str(part.get("text", ""))})
                    else:
                        raise InvalidInputError(
                            f"Unknown content part {part!r}: use {{'type': 'text', 'text': ...}} or "
                            "{'type': 'image', 'image': path | PIL.Image}."
                        )
                content = parts
            messages.append({**m, "content": content})
        if found and given:
            raise InvalidInputError(
                "The messages carry images and images were passed too: give each image once, either as a "
                "{'type': 'image', 'image': ...} part or in the images argument."
            )
        written = any(isinstance(m["content"], str) and self._has_placeholder(m["content"]) for m in messages)
        if given and not written:  # the images argument: at the start of the first user message, as for a str
            first = next((i for i, m in enumerate(messages) if m.get("role") == "user"), None)
            if first is None:
                raise InvalidInputError("The messages need a 'user' message to put the images in.")
            text = messages[first]["content"]
            parts = text if isinstance(text, list) else [{"type": "text", "text": str(text)}]
            messages[first] = {**messages[first], "content": [*({"type": "image"} for _ in given), *parts]}
        return messages, found or given

    def render_prompt(self, prompt: VisionPrompt, images: Images | int = None) -> str:
        """The prompt text before image expansion: one placeholder per image, through the chat template.

        Args:
            prompt: as for :meth:`generate`.
            images: the call's images, or how many there are (as inference4py_genai's ``render_prompt``).
        """
        if isinstance(images, int) and not isinstance(images, bool):
            images = [None] * images  # only counted: nothing is loaded
        return self._render(*self._messages(prompt, images))

    def _render(self, messages: list[dict[str, Any]], images: list[Any]) -> str:
        count = 0

        def flat(content: Any) -> Any:
            nonlocal count
            parts_template = self._list_content and self._layout.kind == "optimum"
            if not isinstance(content, list):
                # a template written for parts may not render plain strings (SmolVLM's iterates the content)
                return [{"type": "text", "text": content}] if parts_template and isinstance(content, str) else content
            if parts_template:
                return content
            text = ""
            for part in content:
                if part["type"] == "image":
                    count += 1
                    text += self._tag(count) + ("\n" if self._layout.kind == "genai" else "")
                else:
                    text += part["text"]
            return text

        rendered: list[Mapping[str, Any]] = [{**m, "content": flat(m.get("content"))} for m in messages]
        if not self._prompts.use_template:
            if len(rendered) != 1 or not isinstance(rendered[0]["content"], str):
                raise ConfigurationError("Chat messages need the chat template: do not turn it off for them.")
            return str(rendered[0]["content"])
        return self._prompts.render_text(rendered)

    def encode(self, prompt: VisionPrompt, images: Images = None) -> tuple[list[int], ImageBatch]:
        """The prompt's token ids as the model reads them, image tokens expanded, and the preprocessed images.

        Image tokens are the image token id (optimum layout), or ``-n`` for image ``n`` (genai layout,
        as onnxruntime-genai's processor writes them).

        Raises:
            InvalidInputError: unreadable images, an empty prompt, or placeholders that do not match the images.
        """
        self._check_open()
        messages, found = self._messages(prompt, images)
        loaded = [load_image(item, i) for i, item in enumerate(found)]
        batch = self.image_processor(loaded)
        ids, _ = self._expand(self._render(messages, found), batch)
        return [int(i) for i in ids[0]], batch

    def _expand(self, text: str, batch: ImageBatch) -> tuple[np.ndarray, np.ndarray]:
        """(model ids ``[1, n]``, image-token mask ``[n]``) of a rendered prompt."""
        tokens = batch.tokens
        lay = self._layout
        if lay.kind == "genai":
            pieces = re.split(r"<\|image_(\d+)\|>", text)
            ids: list[int] = []
            used = []
            for i, piece in enumerate(pieces):
                if i % 2:
                    n = int(piece)
                    if not 1 <= n <= len(tokens):
                        raise InvalidInputError(
                            f"The prompt refers to image {n} ({self._tag(n)}) but {len(tokens)} image(s) were "
                            "given. Pass one image per tag, or remove the tag."
                        )
                    used.append(n)
                    ids += [-n] * tokens[n - 1]
                elif piece:
                    ids += self.tokenizer.encode(piece, add_special_tokens=False)
            placeholders = len(used)
            model = np.asarray([ids], dtype=np.int64)
            mask = model[0] < 0
        else:
            placeholders = text.count(lay.image_token)
            parts = text.split(lay.image_token)
            texts = batch.texts or tuple(lay.image_token * n for n in tokens)
            expanded = parts[0] + "".join(t + p for t, p in zip(texts, parts[1:], strict=False))
            bos = self.tokenizer.bos_token_id
            bos_text = self.tokenizer.decode([bos], skip_special_tokens=False) if bos is not None else None
            add = not (bos_text and expanded.startswith(bos_text))
            model = np.asarray([self.tokenizer.encode(expanded, add_special_tokens=add)], dtype=np.int64)
            mask = model[0] == lay.image_token_id
        if placeholders != len(tokens):
            raise InvalidInputError(
                f"{len(tokens)} image(s) but the prompt has {placeholders} image placeholder(s) "
                f"({self._tag(1)!r}): pass one image per placeholder (an image content part renders one placeholder)."
            )
        if int(mask.sum()) != sum(tokens):
            raise InvalidInputError(
                f"The prompt has {int(mask.sum())} image tokens where the images need {sum(tokens)}: do not write "
                f"the image token {lay.image_token!r} in the text yourself; use image content parts."
            )
        if model.shape[1] == 0:
            raise InvalidInputError("The prompt encodes to no tokens. Pass some text.")
        return model, mask

    # ------------------------------------------------------------------ generation
    def prepare(self, prompt: VisionPrompt, options: RequestOptions, images: Images = None) -> VisionRequest:
        """Decode and preprocess the images, expand the prompt and decide the config of one request.

        Nothing runs on the model's sessions yet, so a bad request fails here, before it waits for them.

        Raises:
            InvalidInputError: unreadable or missing images, placeholders that do not match the images.
            PromptTooLongError: prompt + images + max_new_tokens exceed the context.
            ConfigurationError: invalid options, or options this task does not apply (constraints, tools,
                speculative decoding).
        """
        self._check_open()
        options.refuse_speculation("VisionLanguageModel")
        options.refuse_output("VisionLanguageModel")
        messages, found = self._messages(prompt, images)
        batch = self.image_processor([load_image(item, i) for i, item in enumerate(found)])
        model_ids, mask = self._expand(self._render(messages, found), batch)
        try:
            config = self._planner.for_request(model_ids.shape[1], options)
        except PromptTooLongError as exc:
            if not batch.tokens:
                raise
            raise PromptTooLongError(
                f"{exc} {sum(batch.tokens)} of the prompt's {model_ids.shape[1]} tokens are the "
                f"{len(batch.tokens)} image(s)' tokens: send fewer images."
            ) from exc
        visible = np.where(mask, self._layout.image_token_id or 0, model_ids[0])  # genai's negative ids hidden
        return VisionRequest([int(i) for i in visible], model_ids, mask, batch, config)

    def stream_chunks(
        self,
        images: Images,
        prompt: VisionPrompt | VisionRequest,
        *,
        options: RequestOptions | None = None,
        **overrides: Any,
    ) -> Iterator[GenerationChunk]:
        """The middle tier: :class:`GenerationChunk` objects with token ids and a finish reason.

        ``prompt`` may also be a request :meth:`prepare` made (its images and config decided; the
        server's entry): ``stream_chunks(None, request)``.  Options as :meth:`generate`'s.
        """
        if isinstance(prompt, VisionRequest):
            if images is not None or options is not None or overrides:
                raise ConfigurationError(
                    "A prepared VisionRequest carries its images and options: call stream_chunks(None, request)."
                )
            request = prompt
        else:
            request = self.prepare(prompt, RequestOptions.of_call(options, overrides), images)
        self._check_open()
        capacity = request.prompt_tokens + request.config.max_new_tokens
        state = self._runtime.new_state(request.model_ids, request.image_mask, request.images, capacity=capacity)
        return generate_chunks(state, request.ids, request.config, self.tokenizer, extra_processors=self._processors)

    def request_chunks(
        self, prompt: VisionRequest | VisionPrompt, options: RequestOptions
    ) -> Iterator[GenerationChunk]:
        """Deprecated: ``stream_chunks(None, request)`` or ``stream_chunks(images, prompt, options=options)``."""
        renamed("request_chunks(prompt, options)", "stream_chunks(None, prompt, options=options)")
        if isinstance(prompt, VisionRequest):
            return self.stream_chunks(None, prompt)
        return self.stream_chunks(None, prompt, options=options)

    def generate(
        self,
        images: Images,
        prompt: VisionPrompt,
        on_token: Callable[[str], None] | None = None,
        *,
        options: RequestOptions | None = None,
        **overrides: Any,
    ) -> GenerationResult:
        """Generate text about ``images``.

        Args:
            images: one image or a list: paths, encoded bytes, PIL images or ``H x W x 3`` uint8 arrays;
                None or ``[]`` when the prompt's messages carry the images (or for text only).
            prompt: the question, or chat messages whose content may hold
                ``{"type": "image", "image": path | PIL.Image}`` and ``{"type": "text", "text": ...}`` parts.
            on_token: called with each piece of text as soon as it is final.
            options: the call's options as one typed :class:`~inference4py.tasks.options.RequestOptions`;
                keywords given too replace its fields.
            **overrides: generation options for this call only (``max_new_tokens``, ``temperature``, ...).

        Returns:
            GenerationResult; ``prompt_tokens`` counts the image tokens too.

        Raises:
            InvalidInputError: unreadable or missing images, placeholders that do not match the images.
            PromptTooLongError: prompt + images + max_new_tokens exceed the context.
            ConfigurationError: invalid options.
        """
        started = time.perf_counter()
        request = self.prepare(prompt, RequestOptions.of_call(options, overrides), images)
        chunks = self.stream_chunks(None, request)
        return collect(chunks, prompt_tokens=request.prompt_tokens, started=started, on_token=on_token)

    def stream(
        self, images: Images, prompt: VisionPrompt, *, options: RequestOptions | None = None, **overrides: Any
    ) -> Iterator[str]:
        """Yield the answer piece by piece (complete UTF-8, stop sequences cut)."""
        for chunk in self.stream_chunks(images, prompt, options=options, **overrides):
            if chunk.text:
                yield chunk.text


def _text_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """A vision-language config.json's ``text_config`` (the decoder's; empty when flat)."""
    nested = config.get("text_config")
    return nested if isinstance(nested, dict) else {}


VisionLanguageBuilder._task = VisionLanguageModel
