"""What a decoding attempt reports besides its tokens: the ``<|nospeech|>`` probability and, for word
timestamps, the alignment heads' cross-attention rows and the chosen tokens' probabilities.

* :class:`WindowObserver`: what the runtime reports to (the long-form policy's
  :class:`~inference4py.speech.decoding.WindowScorer` is one); it is also the sampler;
* :class:`WindowProbe`: a decoding state that reports while it runs;
* :class:`AlignmentCapture`: the rows and probabilities of one attempt, made from a :class:`WordSetup`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from inference4py.engine.seq2seq import Seq2SeqState


class WindowObserver(Protocol):
    """The sampler of a decoding attempt, told what the attempt's judgement needs besides its tokens."""

    @property
    def alignment(self) -> AlignmentCapture | None:
        """What collects the cross-attention rows for word timestamps (None: not wanted)."""
        ...

    def __call__(self, scores: np.ndarray, rng: np.random.Generator) -> np.ndarray: ...

    def set_no_speech(self, prob: float) -> None: ...

    def set_sequence_score(self, score: float | None) -> None: ...


def no_speech_probability(logits: np.ndarray, token: int) -> float:
    """``softmax(logits)[token]`` of one row of raw logits (``[vocab]``), computed in float32 like torch."""
    row = np.asarray(logits, dtype=np.float32)
    top = row.max()
    e = np.exp(row - top, dtype=np.float32)
    return float(e[token] / e.sum(dtype=np.float32))


class WindowProbe:
    """A decoding state that reports what the window's judgement and word timestamps need.

    * ``<|nospeech|>``: the prefill stops once at ``<|startoftranscript|>`` (two runs: up to it, then
      the rest), which gives openai-whisper's ``probs_at_sot`` without a separate decoder run;
    * word timestamps: after each one-token step, the alignment heads' cross-attention row, and
      each chosen token's probability among the text tokens (from the raw logits).
    """

    def __init__(
        self,
        state: Seq2SeqState,
        observer: WindowObserver,
        *,
        sot_at: int | None,
        no_speech: int | None,
        capture: AlignmentCapture | None,
    ) -> None:
        self._state = state
        self._observer = observer
        self._sot_at = sot_at
        self._no_speech = no_speech
        self._capture = capture
        if capture is not None:
            state.extra_outputs = capture.outputs

    def prefill(self, input_ids: np.ndarray, attention_mask: np.ndarray | None = None) -> np.ndarray:
        ids = np.asarray(input_ids, dtype=np.int64).reshape(1, -1)
        if self._sot_at is None or self._no_speech is None:
            logits = self._state.prefill(ids)
        else:
            cut = self._sot_at + 1
            at_sot = self._state.prefill(ids[:, :cut])  # [1, vocab]: what follows <|startoftranscript|>
            self._observer.set_no_speech(no_speech_probability(at_sot[0], self._no_speech))
            logits = self._state.prefill(ids[:, cut:]) if ids.shape[1] > cut else at_sot
        if self._capture is not None:
            self._capture.observe(logits[0])
        return logits

    def step(self, tokens: np.ndarray) -> np.ndarray:
        capture = self._capture
        if capture is not None:
            capture.chosen(int(np.asarray(tokens).reshape(-1)[0]))
        logits = self._state.step(tokens)
        if capture is not None:
            capture.attention(self._state.extras)
            capture.observe(logits[0])
        return logits


def default_alignment_heads(layers: int, heads: int) -> list[tuple[int, int]]:
    """Every head of the last half of the decoder layers (transformers' and openai's fallback)."""
    return [(layer, head) for layer in range(layers // 2, layers) for head in range(heads)]


@dataclass(frozen=True)
class WordSetup:
    """What word timestamps need from a model: its alignment heads, which ids are text, DTW's filter width."""

    heads: tuple[tuple[int, int], ...]
    text_mask: np.ndarray  # [vocab] bool: True for text tokens
    median_width: int = 7

    def capture(self) -> AlignmentCapture:
        """A fresh capture for one decoding attempt."""
        return AlignmentCapture(self.heads, self.text_mask)


class AlignmentCapture:
    """The alignment heads' cross-attention rows and the chosen tokens' probabilities of one decoding attempt."""

    def __init__(self, heads: Sequence[tuple[int, int]], text_mask: np.ndarray) -> None:
        layers = sorted({layer for layer, _ in heads})
        self.outputs = tuple(f"cross_attentions.{layer}" for layer in layers)
        self._picks = [(layers.index(layer), head) for layer, head in heads]
        self._text = text_mask
        self._last: np.ndarray | None = None
        self.rows: list[np.ndarray] = []  # per fed generated token: [heads, src]
        self.probabilities: list[float] = []  # per generated token

    def observe(self, logits: np.ndarray) -> None:
        # a copy: the logits processors change the scores in place before the token is chosen
        self._last = np.array(logits, dtype=np.float32)

    def chosen(self, token: int) -> None:
        """Record the probability of ``token`` among the text tokens of the last raw logits (openai's rule)."""
        row = self._last
        self._last = None
        if row is None:
            return
        n = min(row.size, self._text.size)
        if not 0 <= token < n or not self._text[token]:
            self.probabilities.append(0.0)
            return
        text = row[:n][self._text[:n]]
        top = float(text.max())
        lse = top + float(np.log(np.exp(text - top, dtype=np.float64).sum()))
        self.probabilities.append(float(np.exp(float(row[token]) - lse)))

    def attention(self, extras: Sequence[Any], row: int = 0) -> None:
        """Keep the alignment heads' last attention row of batch row ``row`` (``extras``: the step's outputs)."""
        arrays = [np.asarray(v.numpy()) for v in extras]  # each [batch, heads, tgt, src]
        self.rows.append(np.stack([arrays[i][row, h, -1] for i, h in self._picks]))

    def stepped(self, model: Any, row: int) -> None:
        """:meth:`attention` of the step ``model`` (a decoder state with ``extras``) just ran: a RowHook."""
        self.attention(model.extras, row)

    def weights(self) -> np.ndarray:
        """``[heads, rows, src]``."""
        if not self.rows:
            return np.zeros((len(self._picks), 0, 0), np.float32)
        return np.stack(self.rows, axis=1)
