"""CoeditGrammarCorrector: grammar correction with CoEdIT (T5 fine-tuned for text editing)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from inference4py.tasks.seq2seq_base import Seq2SeqBuilder, Seq2SeqTask, TextOutput

__all__ = ["CoeditGrammarCorrector", "coedit_prompt"]


def coedit_prompt(text: str) -> str:
    """CoEdIT's grammar instruction."""
    return f"Fix grammatical errors in this sentence: {text}"


class CoeditGrammarCorrector(Seq2SeqTask):
    """Correct grammar with CoEdIT (inference4j/coedit-base, coedit-large).

    Example:
        >>> CoeditGrammarCorrector.coeditBase().build().correct("I has a apple")   # doctest: +SKIP
    """

    @classmethod
    def coeditBase(cls) -> Seq2SeqBuilder:
        return cls._preset("coeditBase", "inference4j/coedit-base", prompt_formatter=coedit_prompt)

    @classmethod
    def coeditLarge(cls) -> Seq2SeqBuilder:
        return cls._preset("coeditLarge", "inference4j/coedit-large", prompt_formatter=coedit_prompt)

    def correct(self, text: str, on_token: Callable[[str], None] | None = None, **overrides: Any) -> TextOutput:
        """The corrected sentence."""
        return self._run_formatted(text, on_token, overrides, coedit_prompt)
