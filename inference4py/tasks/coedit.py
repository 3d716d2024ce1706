"""CoeditGrammarCorrector: grammar correction with CoEdIT (T5 fine-tuned for text editing)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from inference4py.tasks.presets import Preset, PresetTable
from inference4py.tasks.seq2seq_base import Seq2SeqBuilder, Seq2SeqTask, TextOutput

__all__ = ["COEDIT_PRESETS", "CoeditGrammarCorrector", "coedit_prompt"]


def coedit_prompt(text: str) -> str:
    """CoEdIT's grammar instruction."""
    return f"Fix grammatical errors in this sentence: {text}"


#: CoeditGrammarCorrector's presets: the method name (inference4j's), the Hub repo, the prompt format.
COEDIT_PRESETS = PresetTable(
    Seq2SeqBuilder,
    [
        Preset(
            "coeditBase",
            "inference4j/coedit-base",
            "CoEdIT base, inference4j/coedit-base.",
            {"prompt_formatter": coedit_prompt},
        ),
        Preset(
            "coeditLarge",
            "inference4j/coedit-large",
            "CoEdIT large, inference4j/coedit-large.",
            {"prompt_formatter": coedit_prompt},
        ),
    ],
)


class CoeditGrammarCorrector(Seq2SeqTask):
    """Correct grammar with CoEdIT (inference4j/coedit-base, coedit-large).

    Example:
        >>> CoeditGrammarCorrector.coeditBase().build().correct("I has a apple")   # doctest: +SKIP
    """

    coeditBase = COEDIT_PRESETS.method("coeditBase")  # inference4j's names
    coeditLarge = COEDIT_PRESETS.method("coeditLarge")

    def correct(self, text: str, on_token: Callable[[str], None] | None = None, **overrides: Any) -> TextOutput:
        """The corrected sentence."""
        return self._run_formatted(text, on_token, overrides, coedit_prompt)
