"""Whisper's runtime: the sessions of one model folder, and one 30 s window encoded and decoded.

Everything here runs the engine (onnxruntime); nothing here decides what a window means.  A
:class:`WindowBackend` encodes a window, reads the language after ``<|startoftranscript|>`` and
decodes a window after its prompt, with the logits rules the long-form policy gives it;
:class:`WhisperRuntime` is the native one, over the engine's encoder-decoder step functions
(inference4py_genai has another, over onnxruntime-genai's loop).  The native runtime also decodes
the windows of several recordings as one batch (:meth:`WhisperRuntime.decode_rows`), and rewrites
its decoder once to expose the cross-attention weights that word timestamps read.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import onnxruntime as ort

from inference4py.engine.pipeline import load_pipeline, read_model_config
from inference4py.engine.seq2seq import DecoderGraph, Seq2SeqRuntime, Seq2SeqState
from inference4py.engine.sessions import SessionOptions, create_session
from inference4py.errors import UnsupportedModelError
from inference4py.generation.batch import step_rows
from inference4py.generation.beam import generate_sequences
from inference4py.generation.config import GenerationConfig, read_generation_defaults
from inference4py.generation.processors import LogitsProcessor, make_logits_processors
from inference4py.generation.search import TokenChooser, generate_step
from inference4py.speech.attention import attention_decoder_files
from inference4py.speech.features import feature_settings
from inference4py.speech.probe import (
    AlignmentCapture,
    WindowObserver,
    WindowProbe,
    WordSetup,
    default_alignment_heads,
    no_speech_probability,
)
from inference4py.speech.vocab import WhisperVocab
from inference4py.tokenization import Tokenizer


class WindowBackend(Protocol):
    """What the window loop needs from a backend: one window encoded, its language read, its tokens decoded."""

    def encode(self, window: np.ndarray) -> Any:
        """What the window's decoding needs from the encoder (``window``: ``[1, n_mels, frames]``)."""
        ...

    def detect_language(self, context: Any) -> int:
        """The language token after ``<|startoftranscript|>`` for an encoded window."""
        ...

    def decode(
        self,
        context: Any,
        ids: list[int],
        config: GenerationConfig,
        rules: Sequence[LogitsProcessor],
        sampler: WindowObserver,
        rng: np.random.Generator,
    ) -> Iterator[int]:
        """The tokens generated for one window after the prompt ``ids``.

        ``rules``: Whisper's logits rules and the user's processors, in that order (the backend runs
        the generic processors of ``config`` before them); ``sampler`` chooses and is told the
        ``<|nospeech|>`` probability (and a beam search's score).
        """
        ...

    def close(self) -> None:
        """Release the sessions."""
        ...


class WhisperRuntime:
    """The native backend: a Whisper export's encoder and decoder on the engine's step functions.

    Args:
        seq2seq: the encoder-decoder runtime of the folder.
        vocab: the folder's special ids.
        folder: the model folder (generation_config.json's ``alignment_heads`` are read from it).
        session_options: the options the decoder rewritten for word timestamps is opened with.
    """

    def __init__(
        self, seq2seq: Seq2SeqRuntime, vocab: WhisperVocab, *, folder: Path, session_options: SessionOptions
    ) -> None:
        self.seq2seq = seq2seq
        self.vocab = vocab
        self.folder = folder
        self.session_options = session_options
        self._aligned: Seq2SeqRuntime | None = None  # the decoder with cross_attentions outputs, made on demand

    @classmethod
    def load(cls, folder: Path, session_options: SessionOptions, tokenizer: Tokenizer) -> WhisperRuntime:
        """Open the sessions of a Whisper export (encoder taking ``input_features`` + decoder).

        Raises:
            UnsupportedModelError: a text encoder-decoder model, or a folder that is not Whisper.
        """
        spec = load_pipeline(folder)
        config = read_model_config(folder)
        seq2seq = Seq2SeqRuntime(spec, config, session_options)
        if seq2seq.encoder_input != "input_features":
            raise UnsupportedModelError(
                f"{folder} is a text encoder-decoder model, not a speech model (its encoder takes "
                f"'{seq2seq.encoder_input}'). Use FlanT5TextGenerator / BartSummarizer / MarianTranslator for it, "
                "or point WhisperSpeechModel at a Whisper export (encoder_model.onnx taking input_features)."
            )
        vocab = WhisperVocab.read(folder, tokenizer, config, seq2seq.vocab_size)
        return cls(seq2seq, vocab, folder=folder, session_options=session_options)

    @property
    def config(self) -> Mapping[str, Any]:
        """The model's config.json."""
        return self.seq2seq.config

    @property
    def max_target_positions(self) -> int | None:
        return self.seq2seq.max_target_positions

    @property
    def encoder_runs(self) -> int:
        """How many times the encoder ran (tests check one run per window)."""
        return self.seq2seq.encoder_runs

    def feature_settings(self) -> dict[str, int]:
        """The log-mel settings of the folder, checked against the encoder's input."""
        return feature_settings(self.folder, self.config, self.seq2seq.encoder_inputs["input_features"])

    def close(self) -> None:
        self._aligned = None

    # ------------------------------------------------------------------ one window
    def encode(self, window: np.ndarray) -> tuple[Any, np.ndarray, dict[str, Any]]:
        """The encoder's (hidden states, mask, cross cache when the encoder outputs it) of one window."""
        return self.seq2seq.encode(window)

    def new_state(self, context: tuple[Any, ...]) -> Seq2SeqState:
        """A fresh decoding state attending to an encoded window."""
        return Seq2SeqState(self.seq2seq, *context)

    def detect_language(self, context: tuple[Any, ...]) -> int:
        """One decoder step after ``<|startoftranscript|>``; the most likely language token."""
        logits = self.new_state(context).prefill(np.array([[self.vocab.sot]], dtype=np.int64))[0]
        return self.vocab.most_likely_language(logits)

    def decode(
        self,
        context: tuple[Any, ...],
        ids: list[int],
        config: GenerationConfig,
        rules: Sequence[LogitsProcessor],
        sampler: WindowObserver,
        rng: np.random.Generator,
    ) -> Iterator[int]:
        """See :meth:`WindowBackend.decode`; the sampler's ``alignment`` gets the word timestamps' rows."""
        v = self.vocab
        capture = sampler.alignment
        beams = config.num_beams > 1
        state: Any = (
            Seq2SeqState(self.alignment_runtime(), *context)
            if capture is not None and not beams
            else self.new_state(context)
        )
        processors = make_logits_processors(config, prompt_length=len(ids), extra=list(rules))
        sot_at = ids.index(v.sot) if v.no_speech is not None and v.sot in ids else None
        if not beams:
            state = WindowProbe(state, sampler, sot_at=sot_at, no_speech=v.no_speech, capture=capture)
            yield from generate_step(state, ids, config, processors=processors, sampler=sampler, rng=rng)
            return
        # beam search reorders its state: the <|nospeech|> probe runs on a state of its own
        if sot_at is not None and v.no_speech is not None:
            logits = self.new_state(context).prefill(np.asarray([ids[: sot_at + 1]], dtype=np.int64))
            sampler.set_no_speech(no_speech_probability(logits[0], v.no_speech))
        best = generate_sequences(
            state, ids, config.replace(num_return_sequences=1), processors=processors, sampler=sampler, rng=rng
        )[0]
        sampler.set_sequence_score(best.score)  # transformers judges a beam by its sequences_scores
        tokens = list(best.token_ids)
        if capture is not None:
            self._align_tokens(context, ids, tokens, sampler, capture)
        yield from tokens

    def _align_tokens(
        self,
        context: tuple[Any, ...],
        ids: list[int],
        tokens: list[int],
        sampler: WindowObserver,
        capture: AlignmentCapture,
    ) -> None:
        """Word timestamps of a beam search: the chosen beam's tokens fed again, one by one, on a state of
        their own, so that ``capture`` holds the cross-attention rows and token probabilities greedy
        decoding would have recorded for them (transformers gathers the same rows along the beam's path)."""
        probe = WindowProbe(
            Seq2SeqState(self.alignment_runtime(), *context), sampler, sot_at=None, no_speech=None, capture=capture
        )
        probe.prefill(np.asarray([ids], dtype=np.int64))
        for token in tokens[:-1]:  # as in greedy decoding, the last token is not fed back
            probe.step(np.asarray([token], dtype=np.int64))

    # ------------------------------------------------------------------ word timestamps
    def alignment_runtime(self) -> Seq2SeqRuntime:
        """The runtime whose decoder graphs output ``cross_attentions.{i}`` (rewritten once, cached)."""
        if self._aligned is None:
            rt = self.seq2seq
            spec = rt.spec
            roles = ["decoder", *(["decoder_with_past"] if spec.has("decoder_with_past") else [])]
            layers = rt.config.get("decoder_layers")
            files = attention_decoder_files(
                [Path(spec.path(r)) for r in roles], layers=None if layers is None else int(layers)
            )
            graphs = {}
            for role in roles:
                desc = spec.session(role)
                path = files[Path(spec.path(role))]
                session = create_session(
                    path,
                    self.session_options,
                    provider=desc.provider,
                    provider_options=desc.provider_options,
                    settings=desc.options,
                )
                graphs[role] = DecoderGraph(session, rt.config, path.name, spec)
            aligned = copy.copy(rt)
            aligned.first = graphs["decoder"]
            aligned.rest = graphs.get("decoder_with_past", aligned.first)
            aligned.layout = aligned.rest.layout
            self._aligned = aligned
        return self._aligned

    def word_setup(self) -> WordSetup:
        """The alignment heads, the text-token mask over the vocabulary and DTW's median filter width."""
        v = self.vocab
        size = int(self.seq2seq.vocab_size or 0) or max(v.special_ids | {v.eot}) + 1
        mask = np.ones(size, dtype=bool)
        mask[[i for i in v.special_ids if i < size]] = False
        if v.timestamp_range is not None:
            mask[v.timestamp_range.start : min(v.timestamp_range.stop, size)] = False
        width = int(self.config.get("median_filter_width") or 7)
        return WordSetup(tuple(self._alignment_heads()), mask, width)

    def _alignment_heads(self) -> list[tuple[int, int]]:
        """generation_config ``alignment_heads``, else every head of the last half of the decoder layers."""
        heads = read_generation_defaults(self.folder).get("alignment_heads")
        if heads:
            return [(int(layer), int(head)) for layer, head in heads]
        config = self.config
        layers = int(config.get("decoder_layers") or config.get("num_hidden_layers") or 0)
        n_heads = int(config.get("decoder_attention_heads") or 0)
        if not layers or not n_heads:
            raise UnsupportedModelError(
                f"{self.folder}: word timestamps need alignment_heads in generation_config.json, or decoder_layers and "
                "decoder_attention_heads in config.json to use every head of the last half of the layers."
            )
        return default_alignment_heads(layers, n_heads)

    # ------------------------------------------------------------------ several windows as one batch
    def encode_rows(self, windows: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
        """The encoder run once on several windows: (hidden states ``[rows, src, d_model]``, mask ``[rows, 1]``,
        the cross cache ``[rows, heads, src, head]`` per decoder input when the encoder outputs it)."""
        hidden_value, mask, cross = self.seq2seq.encode(np.concatenate(windows, axis=0))
        return np.asarray(hidden_value.numpy()), mask, {k: np.asarray(v.numpy()) for k, v in cross.items()}

    def detect_language_row(
        self, hidden: np.ndarray, mask: np.ndarray, row: int, cross: dict[str, np.ndarray] | None = None
    ) -> int:
        """:meth:`detect_language` of row ``row`` of :meth:`encode_rows`' output."""
        one = ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(hidden[row : row + 1]))
        rows = _ort_rows(cross or {}, slice(row, row + 1))
        return self.detect_language((one, mask[row : row + 1], rows))

    def decode_rows(
        self,
        hidden: np.ndarray,
        mask: np.ndarray,
        prompts: Sequence[Sequence[int]],
        configs: Sequence[GenerationConfig],
        rules: Sequence[Sequence[LogitsProcessor]],
        samplers: Sequence[WindowObserver],
        rngs: Sequence[np.random.Generator],
        cross: dict[str, np.ndarray] | None = None,
    ) -> list[list[int]]:
        """Greedy / sampled tokens of several windows decoded together (prompts of one length).

        Args:
            hidden: the windows' encoder output ``[rows, src, d_model]``; ``mask`` its ``[rows, 1]`` mask.
            prompts: each row's decoder prompt.
            configs, rules, samplers, rngs: each row's settings, logits rules (as in :meth:`decode`),
                sampler (which also receives its ``<|nospeech|>`` probability) and random generator.
            cross: the rows' cross cache from :meth:`encode_rows` (when the encoder outputs one).
        """
        v = self.vocab
        captures = [s.alignment for s in samplers]
        words = any(c is not None for c in captures)
        runtime = self.alignment_runtime() if words else self.seq2seq
        hidden_value = ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(hidden))
        state = Seq2SeqState(runtime, hidden_value, mask, _ort_rows(cross or {}, slice(None)))
        if words:
            state.extra_outputs = next(c for c in captures if c is not None).outputs
        ids = np.asarray(prompts, dtype=np.int64)  # [rows, n]
        n = ids.shape[1]
        sot_at = list(prompts[0]).index(v.sot) if v.no_speech is not None and v.sot in prompts[0] else None
        if sot_at is not None and v.no_speech is not None:
            at_sot = state.prefill(ids[:, : sot_at + 1])  # [rows, vocab]: what follows <|startoftranscript|>
            for r, sampler in enumerate(samplers):
                sampler.set_no_speech(no_speech_probability(at_sot[r], v.no_speech))
            logits = state.prefill(ids[:, sot_at + 1 :]) if n > sot_at + 1 else at_sot
        else:
            logits = state.prefill(ids)
        choosers = [
            TokenChooser(
                list(p),
                c,
                processors=make_logits_processors(c, prompt_length=n, extra=list(extra)),
                sampler=s,
                rng=rng,
            )
            for p, c, extra, s, rng in zip(prompts, configs, rules, samplers, rngs)
        ]
        step_rows(state, choosers, logits, pad_id=v.eot, hooks=captures)
        return [c.new_ids() for c in choosers]


def _ort_rows(cross: dict[str, np.ndarray], rows: slice) -> dict[str, Any]:
    """Rows of a cross cache as OrtValues (empty when the first decoder run makes it)."""
    return {k: ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(v[rows])) for k, v in cross.items()}
