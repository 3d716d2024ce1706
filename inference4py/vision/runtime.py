"""The sessions of a vision-language model and one call's decoding state, apart from the task class.

A vision-language folder holds three sessions: a vision encoder (``pixel_values`` (+ ``image_sizes``)
-> image features, one row per image token), an embedding session (``input_ids`` ->
``inputs_embeds``; genai's also takes the image features and puts them in place of the image
tokens itself) and a decoder driven by ``inputs_embeds`` with a KV cache.  :func:`find_layout` finds
them from the files (onnxruntime-genai's ``genai_config.json`` or the optimum / onnx-community
parts), :class:`VisionSessions` loads them, and :class:`VisionState` is the token loop's step model
(``prefill`` / ``step`` / ``reorder``).  The KV cache stays in onnxruntime (IO binding): each run's
``present`` values are bound as the next run's ``past``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort

from inference4py.engine.kv_cache import KVLayout, discover_layout
from inference4py.engine.sessions import (
    SessionOptions,
    StepBinding,
    create_session,
    graph_inputs,
    graph_outputs,
    run_session,
)
from inference4py.errors import InvalidInputError, ModelFilesMissingError, UnsupportedModelError
from inference4py.tokenization import Tokenizer
from inference4py.vision.processors import ImageBatch

__all__ = [
    "VisionLayout",
    "VisionSessions",
    "VisionState",
    "PipelineVision",
    "find_layout",
    "genai_description",
    "open_vision",
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


def read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UnsupportedModelError(f"{path} is not readable JSON ({exc}). Re-download the model.") from exc
    return data if isinstance(data, dict) else {}


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
        "context": model.get("context_length"),
        "num_kv_heads": decoder.get("num_key_value_heads"),
        "head_size": decoder.get("head_size"),
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


# --------------------------------------------------------------------------- the three sessions
class VisionSessions:
    """The vision encoder, the embedding session and the inputs_embeds decoder, with what each expects."""

    def __init__(self, layout: VisionLayout, config: Mapping[str, Any], options: SessionOptions) -> None:
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
        # (past input, present output) of each cache tensor, in layout order
        self.cache_names = tuple((e.input, e.output) for e in self.layout.self_entries)
        hidden = inputs["inputs_embeds"].dim(-1) or graph_outputs(self.embedding)[self.embeds_name].dim(-1)
        if hidden is None:
            raise UnsupportedModelError(
                f"{layout.decoder.name}'s inputs_embeds has no fixed hidden size: re-export it with a static last axis."
            )
        self.hidden = int(hidden)
        self.embeds_dtype = inputs["inputs_embeds"].dtype
        vocab = outputs["logits"].dim(-1)
        self.vocab_size = int(vocab) if vocab else None

    def new_state(
        self, model_ids: np.ndarray, image_mask: np.ndarray, batch: ImageBatch, *, capacity: int | None = None
    ) -> VisionState:
        """A fresh state for one prompt: the images through the vision encoder, ready to prefill.

        ``capacity`` is accepted for :class:`PipelineVision`'s sake: this cache grows as it goes.
        """
        features = self.image_features(batch) if batch.tokens else np.zeros((0, self.hidden), np.float32)
        if features.shape[0] != sum(batch.tokens):
            raise UnsupportedModelError(
                f"The vision encoder gave {features.shape[0]} feature rows for {sum(batch.tokens)} image tokens: the "
                "folder's processor configuration (image_seq_length / patch_size) does not match the encoder."
            )
        return VisionState(self, model_ids, image_mask, features)

    def image_features(self, batch: ImageBatch) -> np.ndarray:
        """``[image tokens of every image, hidden]`` for the call's images."""
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
        return np.asarray(features).reshape(-1, features.shape[-1])

    def embed(self, ids: np.ndarray, features: np.ndarray | None) -> np.ndarray:
        """``[1, n, hidden]`` embeddings of ``ids`` ``[1, n]``; image rows from ``features`` when given."""
        feeds: dict[str, Any] = {"input_ids": ids.astype(self.embedding_inputs["input_ids"].dtype)}
        if self.merges_features:
            dtype = self.embedding_inputs[self.feature_name].dtype
            feeds[self.feature_name] = (features if features is not None else np.zeros((0, self.hidden))).astype(dtype)
        (embeds,) = run_session(self.embedding, feeds, [self.embeds_name], what="embedding session")
        return np.asarray(embeds)


class VisionState:
    """One call's decoder state: ``prefill`` embeds the prompt (image features in place), ``step`` one token.

    The prompt's ids as the model reads them (``model_ids``: genai's negative image ids, or the image
    token id) and the positions of image tokens are fixed at construction; ``prefill`` receives the
    ids the token loop sees (one row per beam) and takes only their row count from them.
    """

    def __init__(
        self, sessions: VisionSessions, model_ids: np.ndarray, image_mask: np.ndarray, features: np.ndarray
    ) -> None:
        self.s = sessions
        self.model_ids = model_ids  # [1, n]
        self.image_mask = image_mask  # [n] bool
        self.features = features  # [image tokens, hidden]
        self.past: list[Any] = []  # OrtValues, one per cache tensor in layout order
        self.length = 0
        self.rows = 1
        self.binding = StepBinding(sessions.decoder)
        self.binding.binding.bind_output("logits", "cpu")  # bound first: outputs() = [logits, present...]

    def _run(self, embeds: np.ndarray) -> np.ndarray:
        s, b, n = self.s, self.binding, embeds.shape[1]
        total = self.length + n
        names = s.decoder_inputs
        b.bind_array("inputs_embeds", np.ascontiguousarray(embeds, dtype=s.embeds_dtype))
        if "attention_mask" in names:
            b.bind_array("attention_mask", np.ones((self.rows, total), dtype=names["attention_mask"].dtype))
        if "position_ids" in names:
            positions = np.arange(self.length, total, dtype=names["position_ids"].dtype)
            b.bind_array("position_ids", np.ascontiguousarray(np.broadcast_to(positions, (self.rows, n))))
        if "use_cache_branch" in names:
            b.bind_array("use_cache_branch", np.array([self.length > 0]))
        for name in ("num_logits_to_keep", "logits_to_keep"):
            if name in names:
                b.bind_array(name, np.array(1, dtype=names[name].dtype))
        b.binding.bind_output("logits", "cpu")  # fresh each run: the sequence length changes
        b.rebind_cache(s.cache_names, self.past)
        b.run(what="decoder")
        logits, *self.past = b.outputs()
        self.length = total
        return np.ascontiguousarray(logits.numpy()[:, -1, :], dtype=np.float32)  # [rows, vocab]

    def prefill(self, input_ids: np.ndarray, attention_mask: np.ndarray | None = None) -> np.ndarray:
        if input_ids.ndim != 2 or input_ids.shape[1] != self.model_ids.shape[1]:
            raise InvalidInputError(
                f"This state was made for a {self.model_ids.shape[1]}-token prompt, not {tuple(input_ids.shape)}: "
                "make a new state for another prompt."
            )
        self.rows = int(input_ids.shape[0])
        embeds = self.s.embed(self.model_ids, self.features)  # [1, n, hidden]
        if not self.s.merges_features and self.image_mask.any():
            embeds[0, self.image_mask] = self.features.astype(embeds.dtype, copy=False)
        self.past = [
            ort.OrtValue.ortvalue_from_numpy(self.s.layout.empty(e, self.rows)) for e in self.s.layout.self_entries
        ]
        self.length = 0
        return self._run(np.repeat(embeds, self.rows, axis=0))

    def step(self, tokens: np.ndarray) -> np.ndarray:
        ids = np.asarray(tokens, dtype=np.int64).reshape(-1, 1)  # [rows, 1]
        return self._run(self.s.embed(ids, None))

    def reorder(self, indices: np.ndarray) -> None:
        """Beam search: keep the cache rows ``indices`` (in that order)."""
        self.past = [ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(v.numpy()[indices])) for v in self.past]
        self.rows = len(indices)


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


class PipelineVision:
    """A genai vision folder run by the engine: its description (:func:`genai_description`) on a DecoderRuntime.

    The engine keeps the KV cache (one shared buffer on GroupQueryAttention graphs), runs the
    vision session at the first prefill from the images given to the state, and the embedding
    session before each decoder run.
    """

    def __init__(self, folder: Path, options: SessionOptions) -> None:
        from inference4py.engine.decoder import DecoderRuntime
        from inference4py.engine.pipeline.resolve import resolve_description

        spec = resolve_description(genai_description(folder), folder, source="genai_config.json (vision)")
        self.runtime = DecoderRuntime(spec, {}, options)
        self.vocab_size = self.runtime.vocab_size
        flow = self.runtime.flow
        self.caller_inputs = flow.caller_inputs if flow is not None else ()

    def new_state(
        self, model_ids: np.ndarray, image_mask: np.ndarray, batch: ImageBatch, *, capacity: int | None = None
    ) -> _PromptIds:
        """A fresh engine state for one prompt (``capacity``: prompt + new tokens), its images given to the vision
        session."""
        state = self.runtime.new_state(1, capacity=capacity)
        if batch.tokens:
            given = {f"vision.{k}": v for k, v in batch.inputs.items() if f"vision.{k}" in self.caller_inputs}
            missing = [k for k in self.caller_inputs if k not in given]
            if missing:
                raise UnsupportedModelError(
                    f"The vision session takes {', '.join(missing)}, which the folder's image processor does not "
                    "make: the processor configuration does not match the vision graph."
                )
            state.set_inputs(given)
        return _PromptIds(state, model_ids)


class _PromptIds:
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


def open_vision(
    layout: VisionLayout, folder: Path, config: Mapping[str, Any], options: SessionOptions
) -> VisionSessions | PipelineVision:
    """The runtime of a layout: genai folders on the engine's pipeline, optimum parts on :class:`VisionSessions`.

    The optimum parts stay here: their embedding session does not take the image features, so the
    features are written over the image tokens' embeddings, which a pipeline description cannot say yet.
    """
    if layout.kind == "genai":
        return PipelineVision(folder, options)
    return VisionSessions(layout, config, options)
