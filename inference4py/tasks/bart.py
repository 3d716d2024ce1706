"""BartSummarizer: abstractive summarization with BART-CNN models."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from inference4py.tasks.presets import Preset, PresetTable
from inference4py.tasks.seq2seq_base import Seq2SeqBuilder, Seq2SeqTask, TextOutput

__all__ = ["BART_PRESETS", "BartSummarizer"]

#: BartSummarizer's presets: the method name (inference4j's), the Hub repo (no builder defaults: the
#: search settings are the folder's generation_config.json).
BART_PRESETS = PresetTable(
    Seq2SeqBuilder,
    [
        Preset(
            "distilBartCnn", "inference4j/distilbart-cnn-12-6", "DistilBART-CNN 12-6, inference4j/distilbart-cnn-12-6."
        ),
        Preset("bartLargeCnn", "inference4j/bart-large-cnn", "BART-large-CNN, inference4j/bart-large-cnn."),
    ],
)


class BartSummarizer(Seq2SeqTask):
    """Summarize articles with BART fine-tuned on CNN/DailyMail (raw text in, summary out).

    The search settings (beams, length penalty, no-repeat n-grams, min/max length)
    come from the model's generation_config.json, as in transformers.

    Example:
        >>> with BartSummarizer.distilBartCnn().build() as bart:   # doctest: +SKIP
        ...     print(bart.summarize(article))
    """

    distilBartCnn = BART_PRESETS.method("distilBartCnn")  # inference4j's names
    bartLargeCnn = BART_PRESETS.method("bartLargeCnn")

    def summarize(self, article: str, on_token: Callable[[str], None] | None = None, **overrides: Any) -> TextOutput:
        """The summary of ``article`` (a ``str`` that also carries the GenerationResult)."""
        return self._run_formatted(article, on_token, overrides)
