"""Result types of a generation call."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from inference4py.generation.logprobs import TokenLogprob

__all__ = [
    "GenerationResult",
    "GenerationChunk",
    "Candidate",
    "FinishReason",
    "ToolCall",
    "SpeculativeStats",
    "StreamSummary",
]

FinishReason = Literal["eos", "length", "stop", "tool_calls"]


@dataclass(frozen=True)
class ToolCall:
    """One function call the model asked for (parsed by :mod:`inference4py.tasks.tools`).

    Attributes:
        id: ``call_`` + 24 hex digits (OpenAI's shape); 9 letters and digits for the
            tool-call formats whose templates require that (see tasks/tools/calls.py).
        name: The function name.
        arguments: The decoded arguments (always a dict).
    """

    id: str
    name: str
    arguments: dict[str, Any]

    def to_openai(self) -> dict[str, Any]:
        """The call in OpenAI's wire form (``function.arguments`` as a JSON string)."""
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": json.dumps(self.arguments, ensure_ascii=False)},
        }


@dataclass(frozen=True)
class Candidate:
    """One returned sequence (beam search and multiple samples return several)."""

    text: str
    token_ids: tuple[int, ...]
    score: float | None = None
    finish_reason: FinishReason = "length"


@dataclass(frozen=True)
class StreamSummary:
    """What a finished stream knows besides its chunks' text and ids, carried by its last chunk.

    Attributes:
        candidates: Every returned sequence, best first (beam search, several samples); empty for one.
        speculative: The draft counts of a speculative call; else None.
        final_outputs: What a pipeline's ``final`` sessions returned on the generated ids; else None.
    """

    candidates: tuple[Candidate, ...] = ()
    speculative: SpeculativeStats | None = None
    final_outputs: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class GenerationChunk:
    """One step of a stream: the text that became final with this token.

    ``text`` may be empty (a token that completes no character yet, or text
    held back because it may start a stop sequence).  ``finish_reason`` is set
    on the last chunk only, and ``stop_sequence`` names the stop string that
    ended the stream when it is ``"stop"``.
    """

    text: str
    token_id: int | None
    finish_reason: FinishReason | None = None
    logprob: TokenLogprob | None = None  # with logprobs=True: this chunk's token
    prompt_logprobs: tuple[TokenLogprob | None, ...] | None = None  # with prompt_logprobs: on the first chunk
    summary: StreamSummary | None = None  # on the last chunk, when the stream has more to tell
    stop_sequence: str | None = None  # on the last chunk of a stream a stop string ended

    def summarized(self, **fields: object) -> GenerationChunk:
        """This (last) chunk with ``fields`` of its :class:`StreamSummary` set (the others kept)."""
        values: dict[str, Any] = {**vars(self.summary or StreamSummary()), **fields}
        return replace(self, summary=StreamSummary(**values))


@dataclass(frozen=True)
class SpeculativeStats:
    """How speculative decoding went in one call (``result.speculative``).

    Attributes:
        method: ``"prompt_lookup"`` or ``"draft_model"``.
        drafted_tokens: Tokens proposed and sent to the target model for verification.
        accepted_tokens: Drafted tokens the target kept (each one a token gained over one step per token).
        target_passes: Forward passes of the target model after the prompt (with or without drafts).
    """

    method: str
    drafted_tokens: int
    accepted_tokens: int
    target_passes: int

    @property
    def acceptance_rate(self) -> float:
        """Accepted / drafted tokens (0.0 when nothing was drafted)."""
        return self.accepted_tokens / self.drafted_tokens if self.drafted_tokens else 0.0


@dataclass(frozen=True)
class GenerationResult:
    """What one generation call produced.

    Attributes:
        text: The generated text (the best candidate's), without the prompt and
            without any stop sequence.
        token_ids: Generated token ids only (as transformers returns them: an EOS
            token that ended generation is included).
        prompt_tokens: Number of tokens in the (templated) prompt.
        generated_tokens: Number of tokens generated.
        finish_reason: "eos", "length", "stop", or "tool_calls" when the text held tool calls.
        stop_sequence: With ``finish_reason="stop"``, the stop string that ended the text (one of the
            call's ``stop_sequences``, the first found; the longest when two start at one place); else None.
        duration: Wall time of the call in seconds.
        time_to_first_token: Seconds from the call until the first token was chosen.
        candidates: Every returned sequence, best first.
        logprobs: With ``logprobs=True``, one :class:`TokenLogprob` per generated token; else None.
        tool_calls: The calls parsed from the text when the call passed ``tools`` (``text`` is then
            what remains around them).
        reasoning: A reasoning model's thinking (its ``<think>`` block, or gpt-oss's ``analysis``
            messages, without the markers), split from ``text`` unless the call asked
            ``reasoning="inline"``; None when there was none.
        prompt_logprobs: With ``prompt_logprobs=True`` (OpenAI's ``echo``), one entry per prompt
            token; the first is None (nothing predicts it).
        speculative: With ``speculative=...``, the drafted and accepted token counts; else None.
        final_outputs: For a pipeline with ``final`` sessions (version 2 of the description), what
            they returned after generation, keyed ``"session.output"`` (numpy arrays), computed on
            the best sequence; else None.
    """

    text: str
    token_ids: tuple[int, ...]
    prompt_tokens: int
    generated_tokens: int
    finish_reason: FinishReason
    duration: float
    time_to_first_token: float
    candidates: tuple[Candidate, ...] = field(default=())
    logprobs: tuple[TokenLogprob, ...] | None = None
    tool_calls: tuple[ToolCall, ...] = field(default=())
    prompt_logprobs: tuple[TokenLogprob | None, ...] | None = None
    speculative: SpeculativeStats | None = None
    final_outputs: Mapping[str, Any] | None = None
    reasoning: str | None = None
    stop_sequence: str | None = None

    @property
    def tokens_per_second(self) -> float:
        """Decode speed: tokens after the first, per second of decoding (0.0 if undefined)."""
        decode_time = self.duration - self.time_to_first_token
        if self.generated_tokens <= 1 or decode_time <= 0:
            return 0.0
        return (self.generated_tokens - 1) / decode_time

    def __str__(self) -> str:
        return self.text
