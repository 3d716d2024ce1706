"""FlanT5TextGenerator: Flan-T5 for summarization, translation, grammar correction and free prompts."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from inference4py.tasks.languages import Language
from inference4py.tasks.seq2seq_base import Seq2SeqBuilder, Seq2SeqTask, TextOutput

__all__ = ["FlanT5TextGenerator", "flan_t5_prompt"]


def flan_t5_prompt(text: str, *, task: str, source: Language | None = None, target: Language | None = None) -> str:
    """Flan-T5's instruction prefixes ("summarize: ", "translate English to French: ", "correct grammar: ")."""
    if task == "summarize":
        return f"summarize: {text}"
    if task == "translate":
        return f"translate {source} to {target}: {text}"
    if task == "correct":
        return f"correct grammar: {text}"
    return text


class FlanT5TextGenerator(Seq2SeqTask):
    """Flan-T5 (inference4j/flan-t5-*): one model, several instruction-shaped tasks.

    Example:
        >>> with FlanT5TextGenerator.flanT5Small().build() as t5:   # doctest: +SKIP
        ...     print(t5.translate("Hello", Language.EN, Language.FR))
    """

    @classmethod
    def flanT5Small(cls) -> Seq2SeqBuilder:
        return cls._preset("flanT5Small", "inference4j/flan-t5-small", prompt_formatter=flan_t5_prompt)

    @classmethod
    def flanT5Base(cls) -> Seq2SeqBuilder:
        return cls._preset("flanT5Base", "inference4j/flan-t5-base", prompt_formatter=flan_t5_prompt)

    @classmethod
    def flanT5Large(cls) -> Seq2SeqBuilder:
        return cls._preset("flanT5Large", "inference4j/flan-t5-large", prompt_formatter=flan_t5_prompt)

    def summarize(self, text: str, on_token: Callable[[str], None] | None = None, **overrides: Any) -> TextOutput:
        """Summarize ``text`` ("summarize: ..." prompt)."""
        return self._run_formatted(text, on_token, overrides, flan_t5_prompt, task="summarize")

    def translate(
        self,
        text: str,
        source: Language | str,
        target: Language | str,
        on_token: Callable[[str], None] | None = None,
        **overrides: Any,
    ) -> TextOutput:
        """Translate ``text`` from ``source`` to ``target`` ("translate English to French: ...")."""
        return self._run_formatted(
            text,
            on_token,
            overrides,
            flan_t5_prompt,
            task="translate",
            source=Language.of(source),
            target=Language.of(target),
        )

    def correct(self, text: str, on_token: Callable[[str], None] | None = None, **overrides: Any) -> TextOutput:
        """Fix the grammar of ``text`` ("correct grammar: ...")."""
        return self._run_formatted(text, on_token, overrides, flan_t5_prompt, task="correct")
