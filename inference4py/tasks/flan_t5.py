"""FlanT5TextGenerator: Flan-T5 for summarization, translation, grammar correction and free prompts."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from inference4py.tasks.languages import Language
from inference4py.tasks.presets import Preset, PresetTable
from inference4py.tasks.seq2seq_base import Seq2SeqBuilder, Seq2SeqTask, TextOutput

__all__ = ["FLAN_T5_PRESETS", "FlanT5TextGenerator", "flan_t5_prompt"]


def flan_t5_prompt(text: str, *, task: str, source: Language | None = None, target: Language | None = None) -> str:
    """Flan-T5's instruction prefixes ("summarize: ", "translate English to French: ", "correct grammar: ")."""
    if task == "summarize":
        return f"summarize: {text}"
    if task == "translate":
        return f"translate {source} to {target}: {text}"
    if task == "correct":
        return f"correct grammar: {text}"
    return text


_FLAN = {"prompt_formatter": flan_t5_prompt}

#: FlanT5TextGenerator's presets: the method name (inference4j's), the Hub repo, the builder's defaults.
FLAN_T5_PRESETS = PresetTable(
    Seq2SeqBuilder,
    [
        Preset("flanT5Small", "inference4j/flan-t5-small", "Flan-T5 small (77M), inference4j/flan-t5-small.", _FLAN),
        Preset("flanT5Base", "inference4j/flan-t5-base", "Flan-T5 base (248M), inference4j/flan-t5-base.", _FLAN),
        Preset("flanT5Large", "inference4j/flan-t5-large", "Flan-T5 large (783M), inference4j/flan-t5-large.", _FLAN),
    ],
)


class FlanT5TextGenerator(Seq2SeqTask):
    """Flan-T5 (inference4j/flan-t5-*): one model, several instruction-shaped tasks.

    Example:
        >>> with FlanT5TextGenerator.flanT5Small().build() as t5:   # doctest: +SKIP
        ...     print(t5.translate("Hello", Language.EN, Language.FR))
    """

    flanT5Small = FLAN_T5_PRESETS.method("flanT5Small")  # inference4j's names
    flanT5Base = FLAN_T5_PRESETS.method("flanT5Base")
    flanT5Large = FLAN_T5_PRESETS.method("flanT5Large")

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
