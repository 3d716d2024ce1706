"""PreparedRequest: a request checked and made ready before its first token.

A task turns ``(prompt, RequestOptions)`` into one (``OnnxTextGenerator.prepare``): the prompt's
token ids, the call's validated :class:`~inference4py.generation.config.GenerationConfig` and its
:class:`~inference4py.tasks.output_control.OutputControl` (the constraint compiled once).  Whoever
runs it (the task's own call, the continuous-batching scheduler) asks it for a fresh
:class:`~inference4py.generation.search.TokenChooser` and, at the end, lets it parse tool calls.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from inference4py.generation.config import GenerationConfig
from inference4py.generation.processors import LogitsProcessor, make_logits_processors
from inference4py.generation.result import GenerationResult
from inference4py.generation.search import TokenChooser, new_chooser
from inference4py.tasks.output_control import OutputControl

if TYPE_CHECKING:
    from inference4py.tokenization import Tokenizer

__all__ = ["PreparedRequest"]


@dataclass(frozen=True)
class PreparedRequest:
    """One request, ready to run.

    Attributes:
        ids: The prompt's token ids (chat template and tools applied).
        config: The call's settings.
        control: What the output may be, and how tool calls are parsed out of it.
        extra: The builder's logits processors (the constraint mask is added after them).
    """

    ids: list[int]
    config: GenerationConfig
    control: OutputControl
    extra: tuple[LogitsProcessor, ...] = ()

    def extra_processors(self, tokenizer: Tokenizer) -> tuple[LogitsProcessor, ...]:
        """The builder's processors, then a fresh constraint mask (what follows the config's own)."""
        return self.control.processors(tokenizer, self.config.eos_token_id, self.extra)

    def processors(self, tokenizer: Tokenizer) -> list[LogitsProcessor]:
        """Fresh processors of one sequence: the config's, the builder's, then the constraint mask."""
        return make_logits_processors(self.config, prompt_length=len(self.ids), extra=self.extra_processors(tokenizer))

    def chooser(self, tokenizer: Tokenizer) -> TokenChooser:
        """A fresh chooser of this request's tokens (its own processors, sampler, seed and recorder)."""
        return new_chooser(self.ids, self.config, tokenizer, processors=self.processors(tokenizer))

    def finish(self, result: GenerationResult) -> GenerationResult:
        """The collected result with tool calls parsed, as ``generate()`` returns it."""
        return self.control.finish(result)
