"""VisionLanguageModel: text about images on the native loop (vision encoder + embedding + decoder).

A vision-language folder holds three sessions:

- a vision encoder: ``pixel_values`` (+ ``image_sizes``) -> image features, one row per image token;
- an embedding session: ``input_ids`` -> ``inputs_embeds`` (genai's also takes the image features and
  puts them in place of the image tokens itself);
- a decoder driven by ``inputs_embeds`` with a KV cache (``past_key_values.{i}.key|value``).

Two layouts are found from the files: onnxruntime-genai's (``genai_config.json`` with ``vision`` and
``embedding`` sections, e.g. Phi-3-vision: vision.onnx, embedding.onnx, the decoder) and the
optimum / onnx-community parts (``vision_encoder.onnx``, ``embed_tokens.onnx``,
``decoder_model_merged.onnx``, possibly under ``onnx/``).  Images are preprocessed with pillow +
numpy as the folder's processor configuration says (:mod:`inference4py.vision`); each image's
placeholder in the prompt becomes as many image tokens as its features have rows.  The token loop,
processors, samplers, stop sequences and streaming are the text generator's.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from inference4py.engine.kv_cache import KVLayout, discover_layout
from inference4py.engine.sessions import SessionOptions, create_session, graph_inputs, graph_outputs, run_session
from inference4py.errors import ConfigurationError, InvalidInputError, ModelFilesMissingError, UnsupportedModelError
from inference4py.generation.config import GenerationConfig
from inference4py.generation.generate import collect, generate_chunks
from inference4py.generation.result import GenerationChunk, GenerationResult
from inference4py.tasks.base import CallPlanner, ClosableTask, GenerationBuilder, resolve_generation_defaults
from inference4py.tasks.prompts import ChatOptions, PromptEncoder
from inference4py.tokenization import Tokenizer, load_tokenizer
from inference4py.vision import ImageBatch, ImageInput, load_image, load_image_processor

__all__ = ["VisionLanguageModel", "VisionLanguageBuilder", "VisionPrompt"]

Message = Mapping[str, Any]
VisionPrompt = str | Sequence[Message]
Images = ImageInput | Sequence[ImageInput] | None

_OPTIMUM_FILES = ("vision_encoder.onnx", "embed_tokens.onnx", "decoder_model_merged.onnx")
_TEXT_DECODERS = ("model.onnx", "decoder_model_merged.onnx", "decoder_model.onnx")
# How genai model types mark "image n here" ({n} from 1); their processors split the prompt there.
_GENAI_TAGS = {"phi3v": "<|image_{n}|>"}


# --------------------------------------------------------------------------- folder layouts
@dataclass(frozen=True)
class _Layout:
    kind: str  # "genai" | "optimum"
    vision: Path
    embedding: Path
    decoder: Path
    image_token: str  # the placeholder text of one image in a rendered prompt ("<image>", "<|image_{n}|>")
    image_token_id: int | None  # optimum: the id the placeholder expands to; genai: None (negative ids)
    defaults: dict[str, Any]  # genai_config.json's token ids / context (genai layout only)


def _json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UnsupportedModelError(f"{path} is not readable JSON ({exc}). Re-download the model.") from exc
    return data if isinstance(data, dict) else {}


def _find_layout(folder: Path, tokenizer: Tokenizer) -> _Layout:
    genai = folder / "genai_config.json"
    if genai.is_file():
        return _genai_layout(folder, _json(genai))
    for where in (folder, folder / "onnx"):
        present = [name for name in _OPTIMUM_FILES if (where / name).is_file()]
        if len(present) == len(_OPTIMUM_FILES):
            return _optimum_layout(folder, where, tokenizer)
        if "vision_encoder.onnx" in present:
            missing = [n for n in _OPTIMUM_FILES if n not in present]
            raise ModelFilesMissingError(
                f"{where} has vision_encoder.onnx but not {', '.join(missing)}: a vision-language model needs "
                f"all of {', '.join(_OPTIMUM_FILES)}. Download the missing parts.",
                missing,
            )
    if any((w / n).is_file() for w in (folder, folder / "onnx") for n in _TEXT_DECODERS):
        raise UnsupportedModelError(
            f"{folder} holds a text-only model (no vision encoder): it takes no images. Use OnnxTextGenerator."
        )
    raise UnsupportedModelError(
        f"{folder} is not a vision-language model folder: it needs {', '.join(_OPTIMUM_FILES)} (optimum / "
        "onnx-community layout, possibly under onnx/) or an onnxruntime-genai genai_config.json with vision and "
        "embedding sessions."
    )


def _genai_layout(folder: Path, config: dict[str, Any]) -> _Layout:
    model = config.get("model", {})
    kind = str(model.get("type"))
    if not isinstance(model.get("vision"), dict) or not isinstance(model.get("embedding"), dict):
        raise UnsupportedModelError(
            f"{folder} is a genai {kind!r} model without vision and embedding sessions in genai_config.json: it "
            "takes no images. Use OnnxTextGenerator (or inference4py_genai.TextGenerator) for text-only models."
        )
    tag = _GENAI_TAGS.get(kind)
    if tag is None:
        raise UnsupportedModelError(
            f"genai model type {kind!r} is not run natively (supported: {', '.join(_GENAI_TAGS)}). Run the folder "
            "with inference4py_genai.VisionLanguageModel."
        )
    decoder = model.get("decoder", {})
    defaults = {k: model[k] for k in ("eos_token_id", "pad_token_id", "bos_token_id") if model.get(k) is not None} | {
        "context": model.get("context_length"),
        "num_kv_heads": decoder.get("num_key_value_heads"),
        "head_size": decoder.get("head_size"),
    }
    return _Layout(
        "genai",
        folder / str(model["vision"].get("filename", "vision.onnx")),
        folder / str(model["embedding"].get("filename", "embedding.onnx")),
        folder / str(decoder.get("filename", "model.onnx")),
        tag,
        None,
        defaults,
    )


def _optimum_layout(folder: Path, where: Path, tokenizer: Tokenizer) -> _Layout:
    config = _json(folder / "config.json") if (folder / "config.json").is_file() else {}
    processor = _json(folder / "processor_config.json") if (folder / "processor_config.json").is_file() else {}
    token_id = config.get("image_token_index", config.get("image_token_id"))
    token = processor.get("image_token")
    if token is None and isinstance(token_id, int):
        token = tokenizer.id_to_token(token_id)
    if token is None:
        token = "<image>"
    if token_id is None:
        token_id = tokenizer.token_to_id(token)
    if not isinstance(token_id, int):
        raise UnsupportedModelError(
            f"Cannot tell the image token of {folder}: config.json has no image_token_index / image_token_id and "
            f"the tokenizer has no {token!r}. Add image_token_index to config.json."
        )
    vision, embedding, decoder = (where / n for n in _OPTIMUM_FILES)
    return _Layout("optimum", vision, embedding, decoder, token, int(token_id), {})


# --------------------------------------------------------------------------- the three sessions
class _Sessions:
    """The vision encoder, the embedding session and the inputs_embeds decoder, with what each expects."""

    def __init__(self, layout: _Layout, config: Mapping[str, Any], options: SessionOptions) -> None:
        self.vision = create_session(layout.vision, options)
        self.embedding = create_session(layout.embedding, options)
        self.decoder = create_session(layout.decoder, options)
        self.vision_inputs = graph_inputs(self.vision)
        self.embedding_inputs = graph_inputs(self.embedding)
        self.feature_name = self.vision.get_outputs()[0].name  # image_features
        self.embeds_name = self.embedding.get_outputs()[0].name  # inputs_embeds
        # genai's embedding session takes the image features and merges them itself
        self.merges_features = self.feature_name in self.embedding_inputs
        inputs, outputs = graph_inputs(self.decoder), graph_outputs(self.decoder)
        if "inputs_embeds" not in inputs or "logits" not in outputs:
            raise UnsupportedModelError(
                f"{layout.decoder.name} is not an inputs_embeds decoder (inputs: {sorted(inputs)[:6]}). A "
                "vision-language folder needs a decoder that takes inputs_embeds and returns logits."
            )
        self.layout: KVLayout = discover_layout(
            inputs,
            outputs,
            config,
            graph_name=layout.decoder.name,
            num_kv_heads=layout.defaults.get("num_kv_heads"),
            head_size=layout.defaults.get("head_size"),
        )
        self.decoder_inputs = inputs
        hidden = inputs["inputs_embeds"].dim(-1) or graph_outputs(self.embedding)[self.embeds_name].dim(-1)
        if hidden is None:
            raise UnsupportedModelError(
                f"{layout.decoder.name}'s inputs_embeds has no fixed hidden size: re-export it with a static last axis."
            )
        self.hidden = int(hidden)
        self.embeds_dtype = inputs["inputs_embeds"].dtype
        vocab = outputs["logits"].dim(-1)
        self.vocab_size = int(vocab) if vocab else None

    def image_features(self, batch: ImageBatch) -> np.ndarray:
        """``[image tokens of every image, hidden]`` for the call's images."""
        feeds = {k: v for k, v in batch.inputs.items() if k in self.vision_inputs}
        (features,) = run_session(self.vision, feeds, [self.feature_name], what="vision encoder")
        return np.asarray(features).reshape(-1, features.shape[-1])

    def embed(self, ids: np.ndarray, features: np.ndarray | None) -> np.ndarray:
        """``[1, n, hidden]`` embeddings of ``ids`` ``[1, n]``; image rows from ``features`` when given."""
        feeds: dict[str, Any] = {"input_ids": ids.astype(self.embedding_inputs["input_ids"].dtype)}
        if self.merges_features:
            dtype = self.embedding_inputs[self.feature_name].dtype
            feeds[self.feature_name] = (features if features is not None else np.zeros((0, self.hidden))).astype(dtype)
        (embeds,) = run_session(self.embedding, feeds, [self.embeds_name], what="embedding session")
        return np.asarray(embeds)


class _State:
    """One call's decoder state: ``prefill`` embeds the prompt (image features in place), ``step`` one token.

    The prompt's ids as the model reads them (``model_ids``: genai's negative image ids, or the image
    token id) and the positions of image tokens are fixed at construction; ``prefill`` receives the
    ids the token loop sees (one row per beam) and takes only their row count from them.
    """

    def __init__(self, sessions: _Sessions, model_ids: np.ndarray, image_mask: np.ndarray, features: np.ndarray):
        self.s = sessions
        self.model_ids = model_ids  # [1, n]
        self.image_mask = image_mask  # [n] bool
        self.features = features  # [image tokens, hidden]
        self.past: dict[str, np.ndarray] = {}
        self.length = 0
        self.rows = 1

    def _run(self, embeds: np.ndarray) -> np.ndarray:
        s, n = self.s, embeds.shape[1]
        total = self.length + n
        feeds: dict[str, Any] = {"inputs_embeds": embeds.astype(s.embeds_dtype, copy=False), **self.past}
        names = s.decoder_inputs
        if "attention_mask" in names:
            feeds["attention_mask"] = np.ones((self.rows, total), dtype=names["attention_mask"].dtype)
        if "position_ids" in names:
            positions = np.arange(self.length, total, dtype=names["position_ids"].dtype)
            feeds["position_ids"] = np.broadcast_to(positions, (self.rows, n)).copy()
        if "use_cache_branch" in names:
            feeds["use_cache_branch"] = np.array([self.length > 0])
        for name in ("num_logits_to_keep", "logits_to_keep"):
            if name in names:
                feeds[name] = np.array(1, dtype=names[name].dtype)
        entries = s.layout.self_entries
        wanted = ["logits", *(e.output for e in entries)]
        logits, *present = run_session(s.decoder, feeds, wanted, what="decoder")
        self.past = {e.input: p for e, p in zip(entries, present, strict=True)}
        self.length = total
        return np.ascontiguousarray(logits[:, -1, :], dtype=np.float32)  # [rows, vocab]

    def prefill(self, input_ids: np.ndarray, attention_mask: np.ndarray | None = None) -> np.ndarray:
        self.rows = int(input_ids.shape[0])
        embeds = self.s.embed(self.model_ids, self.features)  # [1, n, hidden]
        if not self.s.merges_features and self.image_mask.any():
            embeds[0, self.image_mask] = self.features.astype(embeds.dtype, copy=False)
        self.past = {e.input: self.s.layout.empty(e, self.rows) for e in self.s.layout.self_entries}
        return self._run(np.repeat(embeds, self.rows, axis=0))

    def step(self, tokens: np.ndarray) -> np.ndarray:
        ids = np.asarray(tokens, dtype=np.int64).reshape(-1, 1)  # [rows, 1]
        embeds = np.concatenate([self.s.embed(ids[i : i + 1], None) for i in range(ids.shape[0])])
        return self._run(embeds)

    def reorder(self, indices: np.ndarray) -> None:
        self.past = {k: v[indices] for k, v in self.past.items()}
        self.rows = len(indices)


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


class VisionLanguageModel(ClosableTask):
    """Answer prompts about images with an ONNX vision-language model, on inference4py's own loop.

    Example:
        >>> vlm = VisionLanguageModel.builder().model_path("tests/fixtures/models/llava-tiny").build()
        >>> result = vlm.generate("tests/fixtures/models/llava-tiny/images/sea.png", "Describe this image.",
        ...                       max_new_tokens=4)
        >>> len(result.token_ids)
        4
    """

    Builder = VisionLanguageBuilder

    @classmethod
    def builder(cls) -> VisionLanguageBuilder:
        """A builder with no model chosen: call ``model_id`` or ``model_path``."""
        return VisionLanguageBuilder()

    @classmethod
    def _from_builder(cls, b: VisionLanguageBuilder) -> VisionLanguageModel:
        return cls(b.resolve_folder(), b)

    def __init__(self, folder: Path, builder: VisionLanguageBuilder) -> None:
        self.folder = Path(folder)
        self._builder_repr = repr(builder)
        self.tokenizer: Tokenizer = load_tokenizer(self.folder)
        self._layout = _find_layout(self.folder, self.tokenizer)
        self.image_processor = load_image_processor(self.folder)
        config = _json(self.folder / "config.json") if (self.folder / "config.json").is_file() else {}
        nested = config.get("text_config")
        text_config: dict[str, Any] = nested if isinstance(nested, dict) else {}
        self._sessions = _Sessions(self._layout, {**config, **text_config}, builder.session_options())
        defaults, totals = resolve_generation_defaults(self.folder)
        genai = {k: v for k, v in self._layout.defaults.items() if k.endswith("token_id")}
        if genai:
            eos = genai.get("eos_token_id")
            genai["eos_token_id"] = tuple(eos) if isinstance(eos, list) else eos
            defaults = defaults.replace(**genai)
        if not defaults.eos_token_id and self.tokenizer.eos_token_id is not None:
            defaults = defaults.replace(eos_token_id=(self.tokenizer.eos_token_id,))
        context = self._layout.defaults.get("context") or next(
            (c.get("max_position_embeddings") for c in (text_config, config) if c.get("max_position_embeddings")),
            None,
        )
        self._planner = CallPlanner(
            defaults, totals, builder.generation_overrides(), extra_eos=builder._eos, context=context
        )
        self._processors = tuple(builder._processors)
        self._prompts = PromptEncoder(self.tokenizer, self.folder, builder, self._sessions.vocab_size)
        self._list_content = self._template_takes_parts()

    @property
    def generation_config(self) -> GenerationConfig:
        """The defaults every call starts from (folder + builder options)."""
        return self._planner.base

    @property
    def layout(self) -> str:
        """``"genai"`` or ``"optimum"``: which folder layout was found."""
        return self._layout.kind

    def __repr__(self) -> str:
        return f"VisionLanguageModel(folder={str(self.folder)!r}, layout={self.layout!r}, builder={self._builder_repr})"

    def _release(self) -> None:
        self._sessions = None  # type: ignore[assignment]  # closed: every call checks _check_open() first

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
                        found.append(part.get("image", part.get("image_url")))
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

    def render_prompt(self, prompt: VisionPrompt, images: Images = None) -> str:
        """The prompt text before image expansion: one placeholder per image, through the chat template."""
        return self._render(*self._messages(prompt, images))

    def _render(self, messages: list[dict[str, Any]], images: list[Any]) -> str:
        count = 0

        def flat(content: Any) -> Any:
            nonlocal count
            if not isinstance(content, list):
                return content
            if self._list_content and self._layout.kind == "optimum":
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
            expanded = parts[0] + "".join(lay.image_token * n + p for n, p in zip(tokens, parts[1:], strict=False))
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
    def _prepare(
        self, images: Images, prompt: VisionPrompt, overrides: Mapping[str, Any]
    ) -> tuple[list[int], GenerationConfig, _State]:
        self._check_open()
        messages, found = self._messages(prompt, images)
        batch = self.image_processor([load_image(item, i) for i, item in enumerate(found)])
        model_ids, mask = self._expand(self._render(messages, found), batch)
        config = self._planner.for_call(model_ids.shape[1], overrides)
        features = (
            self._sessions.image_features(batch) if batch.tokens else np.zeros((0, self._sessions.hidden), np.float32)
        )
        if features.shape[0] != sum(batch.tokens):
            raise UnsupportedModelError(
                f"The vision encoder gave {features.shape[0]} feature rows for {sum(batch.tokens)} image tokens: the "
                "folder's processor configuration (image_seq_length / patch_size) does not match the encoder."
            )
        visible = np.where(mask, self._layout.image_token_id or 0, model_ids[0])  # genai's negative ids hidden
        return [int(i) for i in visible], config, _State(self._sessions, model_ids, mask, features)

    def stream_chunks(self, images: Images, prompt: VisionPrompt, **overrides: Any) -> Iterator[GenerationChunk]:
        """The middle tier: :class:`GenerationChunk` objects with token ids and a finish reason."""
        ids, config, state = self._prepare(images, prompt, overrides)
        return generate_chunks(state, ids, config, self.tokenizer, extra_processors=self._processors)

    def generate(
        self,
        images: Images,
        prompt: VisionPrompt,
        on_token: Callable[[str], None] | None = None,
        **overrides: Any,
    ) -> GenerationResult:
        """Generate text about ``images``.

        Args:
            images: one image or a list: paths, encoded bytes, PIL images or ``H x W x 3`` uint8 arrays;
                None or ``[]`` when the prompt's messages carry the images (or for text only).
            prompt: the question, or chat messages whose content may hold
                ``{"type": "image", "image": path | PIL.Image}`` and ``{"type": "text", "text": ...}`` parts.
            on_token: called with each piece of text as soon as it is final.
            **overrides: generation options for this call only (``max_new_tokens``, ``temperature``, ...).

        Returns:
            GenerationResult; ``prompt_tokens`` counts the image tokens too.

        Raises:
            InvalidInputError: unreadable or missing images, placeholders that do not match the images.
            PromptTooLongError: prompt + images + max_new_tokens exceed the context.
            ConfigurationError: invalid options.
        """
        started = time.perf_counter()
        ids, config, state = self._prepare(images, prompt, overrides)
        chunks = generate_chunks(state, ids, config, self.tokenizer, extra_processors=self._processors)
        return collect(chunks, prompt_tokens=len(ids), started=started, on_token=on_token)

    def stream(self, images: Images, prompt: VisionPrompt, **overrides: Any) -> Iterator[str]:
        """Yield the answer piece by piece (complete UTF-8, stop sequences cut)."""
        for chunk in self.stream_chunks(images, prompt, **overrides):
            if chunk.text:
                yield chunk.text


VisionLanguageBuilder._task = VisionLanguageModel
