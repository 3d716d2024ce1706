"""VisionLanguageModel: text from images + a prompt, with onnxruntime-genai's multimodal pipeline.

genai does the image work natively: its multimodal processor decodes and
transforms the images (``processor_config.json``) and expands each image tag of
the prompt into the model's image tokens; the ``vision`` and ``embedding``
sessions of ``genai_config.json`` turn pixels into embeddings; the decoder loop
runs in C++.  This class renders the prompt (the model's chat template, image
tags first), hands images over in any form, and returns the same
:class:`~inference4py.GenerationResult` as the text generators, with streaming,
stop sequences and sampling handled as in :class:`TextGenerator`.
"""

from __future__ import annotations

import io
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from inference4py.errors import ConfigurationError, InvalidInputError, PromptTooLongError, UnsupportedModelError
from inference4py.generation.config import GenerationConfig
from inference4py.generation.result import GenerationChunk, GenerationResult
from inference4py.tasks.base import ClosableTask
from inference4py.tasks.options import RequestOptions
from inference4py.tasks.prompts import PromptEncoder
from inference4py.tokenization import Tokenizer, load_tokenizer
from inference4py_genai import _base
from inference4py_genai._runtime import load_genai_config, og, open_model, raising
from inference4py_genai.text import GenaiTextGeneratorBuilder

__all__ = ["VisionLanguageModel", "VisionLanguageBuilder", "ImageInput", "PHI3V_TEMPLATE", "IMAGE_TAGS"]

ImageInput = str | os.PathLike[str] | bytes | bytearray | Any  # Any: a PIL image or an HxWx3 uint8 array
Images = ImageInput | Sequence[ImageInput] | None

# Phi-3.5-vision-instruct's chat template (the fallback when a folder carries none).
PHI3V_TEMPLATE = (
    "{% for message in messages %}{{ '<|' + message['role'] + '|>\\n' + message['content'] + '<|end|>\\n' }}"
    "{% endfor %}{% if add_generation_prompt and messages[-1]['role'] != 'assistant' %}{{ '<|assistant|>\\n' }}"
    "{% endif %}"
)

#: How each genai multimodal model type marks "image n here" in the prompt (``{n}`` counts from 1).
#: genai's processor replaces these tags with the image tokens.
IMAGE_TAGS: dict[str, str] = {
    "phi3v": "<|image_{n}|>\n",
    "phi4mm": "<|image_{n}|>",
    "gemma3": "<start_of_image>",
    "qwen2_5_vl": "<|vision_start|><|image_pad|><|vision_end|>",
}


class VisionLanguageBuilder(GenaiTextGeneratorBuilder):
    """Options of a :class:`VisionLanguageModel`: the text generator's, plus ``image_tag``."""

    def __init__(
        self,
        *,
        preset: str | None = None,
        model_id: str | None = None,
        chat_template: str | None = None,
        use_chat_template: bool = True,
    ) -> None:
        super().__init__(
            preset=preset, model_id=model_id, chat_template=chat_template, use_chat_template=use_chat_template
        )
        self._image_tag: str | None = None

    def image_tag(self, tag: str) -> VisionLanguageBuilder:
        """The text that marks an image in the prompt, ``{n}`` being its number from 1 (default: by model type)."""
        if not isinstance(tag, str) or not tag:
            raise ConfigurationError("image_tag needs a non-empty string such as '<|image_{n}|>\\n'.")
        self._image_tag = tag
        return self


class VisionLanguageModel(ClosableTask):
    """Answer prompts about images with a vision-language model exported for onnxruntime-genai.

    Example:
        >>> with VisionLanguageModel.phi3Vision().build() as vlm:                 # doctest: +SKIP
        ...     print(vlm.generate("photo.jpg", "Describe this image.").text)
    """

    Builder = VisionLanguageBuilder

    # ------------------------------------------------------------------ presets
    @classmethod
    def builder(cls) -> VisionLanguageBuilder:
        """A builder with no model chosen: call ``model_id`` or ``model_path`` (a genai multimodal folder)."""
        return VisionLanguageBuilder()

    @classmethod
    def phi3Vision(cls) -> VisionLanguageBuilder:  # inference4j's name
        """Phi-3.5 Vision Instruct (4.2B), inference4j/phi-3.5-vision-instruct."""
        return VisionLanguageBuilder(
            preset="phi3Vision", model_id="inference4j/phi-3.5-vision-instruct", chat_template=PHI3V_TEMPLATE
        )

    # ------------------------------------------------------------------ construction
    @classmethod
    def _from_builder(cls, b: VisionLanguageBuilder) -> VisionLanguageModel:
        return cls(b.resolve_folder(), b)

    def __init__(self, folder: Path, builder: VisionLanguageBuilder) -> None:
        self.folder = Path(folder)
        self._builder_repr = repr(builder)
        genai_config = load_genai_config(self.folder)
        model_section = genai_config["model"]
        self.model_type = str(model_section.get("type"))
        if not isinstance(model_section.get("vision"), dict):
            raise UnsupportedModelError(
                f"{self.folder} is a {self.model_type!r} model without a vision section in genai_config.json: it "
                "takes no images. Use TextGenerator for text-only models."
            )
        tag = builder._image_tag or IMAGE_TAGS.get(self.model_type)
        if tag is None:
            raise ConfigurationError(
                f"No image tag is known for genai model type {self.model_type!r}: pass the text that marks an image "
                "in its prompts, e.g. .image_tag('<|image_{n}|>\\n')."
            )
        self._image_tag = tag
        self.tokenizer: Tokenizer = load_tokenizer(self.folder)
        defaults, totals, context = _base.genai_defaults(self.folder, genai_config)
        self._planner = _base.GenaiPlanner(
            defaults,
            totals,
            builder.generation_overrides(),
            extra_eos=builder._eos,
            context=context,
            total_counts_prompt=True,
            model_eos=_base.genai_eos(genai_config),
        )
        self._context = context
        self._processors = tuple(builder._processors)
        self._prompts = PromptEncoder(self.tokenizer, self.folder, builder, None)
        self._model = open_model(self.folder, genai_config, providers=builder._providers, threads=builder._threads)
        with raising(
            UnsupportedModelError,
            f"creating the multimodal processor of {self.folder}",
            "The folder needs the processor configuration genai_config.json names (processor_config.json).",
        ):
            self._processor = self._model.create_multimodal_processor()

    @property
    def generation_config(self) -> GenerationConfig:
        """The defaults every call starts from (genai_config.json + builder options)."""
        return self._planner.base

    def __repr__(self) -> str:
        return (
            f"VisionLanguageModel(folder={str(self.folder)!r}, type={self.model_type!r}, builder={self._builder_repr})"
        )

    def _release(self) -> None:
        self._processor = None
        self._model = None

    # ------------------------------------------------------------------ inputs
    def render_prompt(self, prompt: str | Sequence[Mapping[str, Any]], image_count: int) -> str:
        """The prompt text genai's processor receives: image tags, then the prompt, through the chat template.

        Args:
            prompt: the user's text, or chat messages (the image tags go at the start of the first user message).
            image_count: how many images the call has.
        """
        tags = "".join(self._image_tag.replace("{n}", str(i + 1)) for i in range(image_count))
        if isinstance(prompt, str):
            if not prompt.strip() and not image_count:
                raise InvalidInputError("The prompt is empty and there is no image. Pass some text or an image.")
            messages: list[Mapping[str, Any]] = [{"role": "user", "content": tags + prompt}]
        elif isinstance(prompt, (list, tuple)) and prompt and all(isinstance(m, Mapping) for m in prompt):
            messages = [dict(m) for m in prompt]
            first_user = next((i for i, m in enumerate(messages) if m.get("role") == "user"), None)
            if first_user is None:
                raise InvalidInputError("The messages need a 'user' message (the image tags go into the first one).")
            messages[first_user] = {
                **messages[first_user],
                "content": tags + str(messages[first_user].get("content", "")),
            }
        else:
            raise InvalidInputError(
                f"Unsupported prompt of type {type(prompt).__name__}: pass a str or a list of "
                "{'role': ..., 'content': ...} messages."
            )
        if not self._prompts.use_template:
            if not isinstance(prompt, str):
                raise ConfigurationError("Chat messages need the chat template: do not turn it off for them.")
            return tags + prompt
        return self._prompts.render_text(messages)

    def _images(self, images: Images) -> Any:
        """Images of any accepted form as one ``og.Images`` (None when there are none)."""
        if images is None:
            return None
        items = list(images) if isinstance(images, (list, tuple)) else [images]
        if not items:
            return None
        data = [_image_bytes(item, i) for i, item in enumerate(items)]
        with raising(
            InvalidInputError, "reading the images", "Pass JPEG / PNG / BMP files, their bytes, or PIL images."
        ):
            return og().Images.open_bytes(*data), len(data)

    def _inputs(self, images: Images, prompt: str | Sequence[Mapping[str, Any]]) -> tuple[Any, np.ndarray]:
        opened = self._images(images)
        og_images, count = opened if opened is not None else (None, 0)
        text = self.render_prompt(prompt, count)
        with raising(
            InvalidInputError, "preparing the prompt and images", "Check that the prompt has one image tag per image."
        ):
            inputs = self._processor(text, images=og_images) if og_images is not None else self._processor(text)
            ids = np.asarray(inputs["input_ids"].as_numpy(), dtype=np.int64).reshape(-1)  # image tokens: negative ids
        if ids.size == 0:
            raise InvalidInputError("The prompt encodes to no tokens. Pass some text.")
        return inputs, ids

    # ------------------------------------------------------------------ generation
    def _call(self, images: Images, prompt: str | Sequence[Mapping[str, Any]], options: RequestOptions) -> _base.Call:
        self._check_open()
        options.refuse_speculation("This call")
        options.refuse_output("This call")
        inputs, ids = self._inputs(images, prompt)
        if self._context is not None and ids.size >= self._context:
            raise PromptTooLongError(
                f"The prompt and its images take {ids.size} tokens but the model's context is {self._context} "
                "tokens. Use fewer or smaller images, or a shorter prompt."
            )
        config = self._planner.for_request(int(ids.size), options)

        def feed(generator: Any) -> None:
            generator.set_inputs(inputs)

        return _base.Call(
            model=self._model,
            tokenizer=self.tokenizer,
            config=config,
            feed=feed,
            prompt_ids=[int(i) for i in ids],
            model_eos=self._planner.model_eos,
            extra_processors=self._processors,
            skip=int(ids.size),
        )

    def generate(
        self,
        images: Images,
        prompt: str | Sequence[Mapping[str, Any]],
        on_token: Callable[[str], None] | None = None,
        *,
        options: RequestOptions | None = None,
        **overrides: Any,
    ) -> GenerationResult:
        """Generate text about ``images``.

        Args:
            images: one image or a list: file paths, encoded bytes (JPEG, PNG, ...), PIL images or
                ``H x W x 3`` uint8 arrays; None or ``[]`` for a text-only prompt.
            prompt: the question / instruction, or chat messages.
            on_token: called with each piece of text as soon as it is final.
            options: the call's options as one typed :class:`~inference4py.tasks.options.RequestOptions`,
                as :meth:`inference4py.VisionLanguageModel.generate` takes them; keywords given too
                replace its fields (``RequestOptions.of_call``).
            **overrides: generation options for this call only.

        Returns:
            GenerationResult; ``prompt_tokens`` counts the image tokens too.

        Raises:
            InvalidInputError: unreadable images, empty prompt.
            PromptTooLongError: prompt + images + max_new_tokens exceed the context.
            ConfigurationError: invalid options, or options this task does not apply (constraints, tools,
                speculative decoding).
            InferenceError: onnxruntime-genai failed while generating.
        """
        started = time.perf_counter()
        call = self._call(images, prompt, RequestOptions.of_call(options, overrides))
        return _base.run_generation(call, started=started, on_token=on_token)

    def stream_chunks(
        self,
        images: Images,
        prompt: str | Sequence[Mapping[str, Any]],
        *,
        options: RequestOptions | None = None,
        **overrides: Any,
    ) -> Iterator[GenerationChunk]:
        """The middle tier: :class:`GenerationChunk` objects with token ids and a finish reason.

        Options as :meth:`generate`'s.
        """
        return _base.stream_chunks(self._call(images, prompt, RequestOptions.of_call(options, overrides)))

    def stream(
        self,
        images: Images,
        prompt: str | Sequence[Mapping[str, Any]],
        *,
        options: RequestOptions | None = None,
        **overrides: Any,
    ) -> Iterator[str]:
        """Yield the answer piece by piece (complete UTF-8, no stop sequences)."""
        for chunk in self.stream_chunks(images, prompt, options=options, **overrides):
            if chunk.text:
                yield chunk.text


VisionLanguageBuilder._task = VisionLanguageModel


def _image_bytes(item: Any, index: int) -> bytes:
    """Encoded image bytes genai can decode, from a path, bytes, a PIL image or an HxWx3 uint8 array.

    Every image is decoded with Pillow first: genai's JPEG decoder ends the whole
    process on a corrupt file (libjpeg's default error handler calls ``exit``),
    so nothing it cannot read may reach it.  JPEG and PNG bytes are passed on as
    they are; other formats (WebP, GIF, BMP, TIFF, ...) are re-encoded as PNG.
    """
    from PIL import Image, UnidentifiedImageError

    from inference4py.vision.images import image_source

    source = image_source(item, index)  # paths, data URLs, arrays; web addresses and empty bytes refused
    if isinstance(source, bytes):
        try:
            with Image.open(io.BytesIO(source)) as image:
                image.load()  # a full decode: truncated files fail here, not inside genai
                if image.format in ("JPEG", "PNG"):
                    return source
                return _png(image)
        except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as exc:
            raise InvalidInputError(
                f"Image {index + 1} cannot be decoded ({exc}). Pass a JPEG, PNG, WebP, GIF or BMP image."
            ) from exc
    return _png(source)


def _png(image: Any) -> bytes:
    buffer = io.BytesIO()
    image.convert("RGB").save(buffer, format="PNG")
    return buffer.getvalue()
