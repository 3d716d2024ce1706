"""A vision-language folder on the engine, apart from the task class.

A vision-language folder holds three sessions: a vision encoder (``pixel_values`` (+ ``image_sizes`` /
``pixel_attention_mask``) -> image features, one row per image token), an embedding session
(``input_ids`` -> ``inputs_embeds``; genai's also takes the image features and puts them in place
of the image tokens itself) and a decoder driven by ``inputs_embeds`` with a KV cache.
:func:`find_layout` finds them from the files (onnxruntime-genai's ``genai_config.json`` or the
optimum / onnx-community parts); :class:`VisionPipeline` runs them as an engine pipeline
(``DecoderRuntime``: the embedding session wired into the decoder) and makes one state per prompt
(:class:`PromptState`, the token loop's ``prefill`` / ``step`` / ``reorder``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from inference4py.engine.sessions import (
    SessionOptions,
    create_session,
    graph_inputs,
    run_session,
)
from inference4py.errors import InvalidInputError, ModelFilesMissingError, UnsupportedModelError
from inference4py.tokenization import Tokenizer
from inference4py.vision.processors import ImageBatch, read_json

__all__ = [
    "VisionLayout",
    "VisionPipeline",
    "PromptState",
    "find_layout",
    "genai_description",
    "is_vision_folder",
    "read_json",
]

_OPTIMUM_FILES = ("vision_encoder.onnx", "embed_tokens.onnx", "decoder_model_merged.onnx")
_TEXT_DECODERS = ("model.onnx", "decoder_model_merged.onnx", "decoder_model.onnx")
# How genai model types mark "image n here" ({n} from 1); their processors split the prompt there.
GENAI_TAGS = {"phi3v": "<|image_{n}|>"}


@dataclass(frozen=True)
class VisionLayout:
    kind: str  # "genai" | "optimum"
    vision: Path
    embedding: Path
    decoder: Path
    image_token: str  # the placeholder text of one image in a rendered prompt ("<image>", "<|image_{n}|>")
    image_token_id: int | None  # optimum: the id the placeholder expands to; genai: None (negative ids)
    defaults: dict[str, Any]  # genai_config.json's token ids / context (genai layout only)


def is_vision_folder(folder: Path) -> bool:
    """Whether ``folder`` holds a vision-language model, from its file names alone (nothing is opened):
    a vision encoder of the optimum / onnx-community parts, or a genai_config.json with a ``vision`` session."""
    genai = folder / "genai_config.json"
    if genai.is_file():
        try:
            model = json.loads(genai.read_text(encoding="utf-8")).get("model", {})
        except (OSError, ValueError, AttributeError):
            return False  # the text loader says what is wrong with it
        return isinstance(model, dict) and isinstance(model.get("vision"), dict)
    return any((where / "vision_encoder.onnx").is_file() for where in (folder, folder / "onnx"))


def find_layout(folder: Path, tokenizer: Tokenizer) -> VisionLayout:
    genai = folder / "genai_config.json"
    if genai.is_file():
        return _genai_layout(folder, read_json(genai))
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


def _genai_layout(folder: Path, config: dict[str, Any]) -> VisionLayout:
    model = config.get("model", {})
    kind = str(model.get("type"))
    if not isinstance(model.get("vision"), dict) or not isinstance(model.get("embedding"), dict):
        raise UnsupportedModelError(
            f"{folder} is a genai {kind!r} model without vision and embedding sessions in genai_config.json: it "
            "takes no images. Use OnnxTextGenerator (or inference4py_genai.TextGenerator) for text-only models."
        )
    tag = GENAI_TAGS.get(kind)
    if tag is None:
        raise UnsupportedModelError(
            f"genai model type {kind!r} is not run natively (supported: {', '.join(GENAI_TAGS)}). Run the folder "
            "with inference4py_genai.VisionLanguageModel."
        )
    decoder = model.get("decoder", {})
    defaults = {k: model[k] for k in ("eos_token_id", "pad_token_id", "bos_token_id") if model.get(k) is not None} | {
        "context": model.get("context_length")
    }
    return VisionLayout(
        "genai",
        folder / str(model["vision"].get("filename", "vision.onnx")),
        folder / str(model["embedding"].get("filename", "embedding.onnx")),
        folder / str(decoder.get("filename", "model.onnx")),
        tag,
        None,
        defaults,
    )


def _optimum_layout(folder: Path, where: Path, tokenizer: Tokenizer) -> VisionLayout:
    config = read_json(folder / "config.json") if (folder / "config.json").is_file() else {}
    processor = read_json(folder / "processor_config.json") if (folder / "processor_config.json").is_file() else {}
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
    return VisionLayout("optimum", vision, embedding, decoder, token, int(token_id), {})


# --------------------------------------------------------------------------- genai folders on the engine
def genai_description(folder: Path) -> dict[str, Any]:
    """A version-2 pipeline description of a genai vision folder (genai_config.json's names and files).

    The vision session runs once per prompt (init), the embedding session before every decoder run
    (step), wired: ``vision.image_features -> embedding.image_features``,
    ``embedding.inputs_embeds -> decoder.inputs_embeds``.
    """
    model = read_json(folder / "genai_config.json").get("model", {})
    vision, embedding, decoder = model["vision"], model["embedding"], model.get("decoder", {})
    features = vision.get("outputs", {}).get("image_features", "image_features")
    embeds = embedding.get("outputs", {}).get("inputs_embeds", "inputs_embeds")
    return {
        "version": 2,
        "pipeline": {
            "sessions": {
                "vision": {"file": str(vision.get("filename", "vision.onnx"))},
                "embedding": {"file": str(embedding.get("filename", "embedding.onnx"))},
                "decoder": {"file": str(decoder.get("filename", "model.onnx"))},
            },
            "flow": [
                {"run": "vision", "when": "init", "loop": "batched"},
                {"run": "embedding", "when": "step"},
                {"run": "decoder", "when": "step"},
            ],
            "dataflow": [
                {
                    "from": f"vision.{features}",
                    "to": f"embedding.{embedding.get('inputs', {}).get('image_features', 'image_features')}",
                },
                {
                    "from": f"embedding.{embeds}",
                    "to": f"decoder.{decoder.get('inputs', {}).get('inputs_embeds', 'inputs_embeds')}",
                },
            ],
            "state": {
                "kv_cache": {
                    k: v
                    for k, v in (
                        ("num_kv_heads", decoder.get("num_key_value_heads")),
                        ("head_size", decoder.get("head_size")),
                    )
                    if v
                }
            },
        },
    }


class VisionPipeline:
    """A vision-language folder on the engine: a :class:`~inference4py.engine.decoder.DecoderRuntime` whose
    embedding session feeds the ``inputs_embeds`` decoder, and the images' way in.

    - genai folders: :func:`genai_description` makes the vision session an init session wired into
      the embedding session (which puts the features in place of the negative image ids); the
      images' arrays go to the state with ``set_inputs({"vision.pixel_values": ...})``.
    - optimum parts: the folder's detected pipeline (embedding step session -> decoder); the vision
      encoder runs here and its features are written over the image tokens' rows of the prompt's
      embeddings, handed to the state as ``embedding.inputs_embeds`` for the first prefill.

    The engine keeps the KV cache (one shared buffer on GroupQueryAttention graphs) and runs the
    embedding session on every new token.
    """

    def __init__(self, layout: VisionLayout, folder: Path, config: Mapping[str, Any], options: SessionOptions) -> None:
        from inference4py.engine.decoder import DecoderRuntime
        from inference4py.engine.pipeline import load_pipeline
        from inference4py.engine.pipeline.resolve import resolve_description

        self.kind = layout.kind
        if layout.kind == "genai":
            spec = resolve_description(genai_description(folder), folder, source="genai_config.json (vision)")
            self.runtime = DecoderRuntime(spec, {}, options)
            self.vision = None
        else:
            self.runtime = DecoderRuntime(load_pipeline(folder), config, options)
            self.vision = create_session(layout.vision, options)
            self.vision_inputs = graph_inputs(self.vision)
            self.feature_name = self.vision.get_outputs()[0].name  # image_features
        flow = self.runtime.flow
        self.caller_inputs: tuple[str, ...] = flow.caller_inputs if flow is not None else ()
        self.prompt_outputs: tuple[str, ...] = flow.prompt_outputs if flow is not None else ()
        if flow is None or not flow.feeds_decoder or (self.vision is not None and not self.prompt_outputs):
            raise UnsupportedModelError(
                f"{folder}'s decoder does not take its embeddings from an embedding session, so the image features "
                "have no way in. A vision-language folder needs an embedding session (embed_tokens.onnx) feeding an "
                "inputs_embeds decoder; describe it in inference4py.json if its files are named otherwise."
            )
        self.vocab_size = self.runtime.vocab_size

    def image_features(self, batch: ImageBatch) -> np.ndarray:
        """``[image tokens of every image, hidden]`` from the vision encoder (optimum parts)."""
        assert self.vision is not None  # the optimum layout only: genai's vision runs in the pipeline
        feeds = {
            k: v.astype(self.vision_inputs[k].dtype, copy=False)
            for k, v in batch.inputs.items()
            if k in self.vision_inputs
        }
        missing = [k for k in self.vision_inputs if k not in feeds]
        if missing:
            raise UnsupportedModelError(
                f"The vision encoder takes {', '.join(missing)}, which the folder's image processor does not make "
                f"(it makes {', '.join(batch.inputs)}): the preprocessor configuration does not match the encoder."
            )
        (features,) = run_session(self.vision, feeds, [self.feature_name], what="vision encoder")
        features = np.asarray(features)
        features = features.reshape(-1, features.shape[-1])
        if features.shape[0] != sum(batch.tokens):
            raise UnsupportedModelError(
                f"The vision encoder gave {features.shape[0]} feature rows for {sum(batch.tokens)} image tokens: the "
                "folder's processor configuration (image_seq_length / patch_size) does not match the encoder."
            )
        return features

    def new_state(
        self, model_ids: np.ndarray, image_mask: np.ndarray, batch: ImageBatch, *, capacity: int | None = None
    ) -> PromptState:
        """A fresh engine state for one prompt (``capacity``: prompt + new tokens) with its images given."""
        state = self.runtime.new_state(1, capacity=capacity)
        if not batch.tokens:
            return PromptState(state, model_ids)
        if self.vision is None:  # genai: the pipeline's vision session takes the arrays
            given = {f"vision.{k}": v for k, v in batch.inputs.items() if f"vision.{k}" in self.caller_inputs}
            missing = [k for k in self.caller_inputs if k not in given]
            if missing:
                raise UnsupportedModelError(
                    f"The vision session takes {', '.join(missing)}, which the folder's image processor does not "
                    "make: the processor configuration does not match the vision graph."
                )
            state.set_inputs(given)
            return PromptState(state, model_ids)
        features = self.image_features(batch)
        flow = self.runtime.flow
        assert flow is not None  # checked at construction
        key = self.prompt_outputs[0]  # "embedding.inputs_embeds"
        embeds = np.array(next(iter(flow.decoder_inputs(model_ids, {}, prompt=True).values())))  # [1, n, hidden]
        embeds[0, image_mask] = features.astype(embeds.dtype, copy=False)
        state.set_inputs({key: embeds})
        return PromptState(state, model_ids)


class PromptState:
    """Feeds the engine state the prompt as the model reads it (genai's negative image ids) whatever ids the
    token loop holds (image positions shown as an ordinary id, so logits processors index the vocabulary)."""

    def __init__(self, state: Any, model_ids: np.ndarray) -> None:
        self.state = state
        self.model_ids = model_ids  # [1, n]

    def prefill(self, input_ids: np.ndarray, attention_mask: np.ndarray | None = None) -> np.ndarray:
        if input_ids.ndim != 2 or input_ids.shape[1] != self.model_ids.shape[1]:
            raise InvalidInputError(
                f"This state was made for a {self.model_ids.shape[1]}-token prompt, not {tuple(input_ids.shape)}: "
                "make a new state for another prompt."
            )
        return np.asarray(self.state.prefill(np.repeat(self.model_ids, input_ids.shape[0], axis=0)))

    def step(self, tokens: np.ndarray) -> np.ndarray:
        return np.asarray(self.state.step(tokens))

    def reorder(self, indices: np.ndarray) -> None:
        self.state.reorder(indices)
