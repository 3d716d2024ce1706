"""MarianTranslator: Helsinki-NLP opus-mt translation models."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from inference4py.errors import ConfigurationError, UnsupportedModelError
from inference4py.tasks.languages import Language
from inference4py.tasks.presets import Preset, PresetTable
from inference4py.tasks.seq2seq_base import Seq2SeqBuilder, Seq2SeqTask, TextOutput

__all__ = ["MARIAN_PRESETS", "MarianTranslator"]

_TARGET_TOKEN = re.compile(r"^>>([A-Za-z_]+)<<$")


def _pair(name: str, source: Language, target: Language) -> Preset:
    repo = f"inference4j/opus-mt-{source.iso_code}-{target.iso_code}"
    return Preset(name, repo, f"opus-mt {source} to {target}, {repo}.", {"source": source, "target": target})


#: MarianTranslator's presets: the method name (inference4j's), the Hub repo, the language pair.
MARIAN_PRESETS = PresetTable(
    Seq2SeqBuilder,
    [
        _pair("opusMtEnDe", Language.EN, Language.DE),
        _pair("opusMtEnFr", Language.EN, Language.FR),
        _pair("opusMtEnEs", Language.EN, Language.ES),
    ],
)


class MarianTranslator(Seq2SeqTask):
    """Translate with MarianMT (inference4j/opus-mt-*).

    Fixed-pair models (opus-mt-en-de) translate one direction.  Multilingual
    models choose the output language with a ``>>xxx<<`` token in front of the
    input; ``translate(text, target=...)`` adds it for you.

    Example:
        >>> with MarianTranslator.opusMtEnDe().build() as mt:   # doctest: +SKIP
        ...     print(mt.translate("How are you?"))
    """

    opusMtEnDe = MARIAN_PRESETS.method("opusMtEnDe")  # inference4j's names
    opusMtEnFr = MARIAN_PRESETS.method("opusMtEnFr")
    opusMtEnEs = MARIAN_PRESETS.method("opusMtEnEs")

    @property
    def target_languages(self) -> tuple[str, ...]:
        """The ``>>xxx<<`` codes of a multilingual model (empty for a fixed pair)."""
        cached = getattr(self, "_targets", None)
        if cached is None:
            candidates = {code for lang in Language for code in (lang.iso3_code, lang.iso_code)}
            cached = tuple(sorted(c for c in candidates if self.tokenizer.token_to_id(f">>{c}<<") is not None))
            self._targets = cached
        return cached

    def target_prefix(self, target: Language | str | None, source: Language | str | None = None) -> str:
        """The ``>>xxx<< `` text a multilingual model needs before the source ("" for a one-pair model).

        Raises :class:`~inference4py.errors.UnsupportedModelError` for a pair the model cannot do and
        :class:`~inference4py.errors.ConfigurationError` when a multilingual model gets no target.
        """
        fixed_src = self._preset_fields.get("source")
        fixed_tgt = self._preset_fields.get("target")
        codes = self.target_languages
        if not codes:
            if target is None:
                return ""
            tgt = Language.of(target) if not (isinstance(target, str) and _TARGET_TOKEN.match(target)) else None
            if fixed_tgt is not None and tgt is fixed_tgt and (source is None or Language.of(source) is fixed_src):
                return ""
            pair = f"{fixed_src.iso_code}->{fixed_tgt.iso_code}" if fixed_src and fixed_tgt else "one fixed pair"
            raise UnsupportedModelError(
                f"This Marian model translates {pair} only and cannot produce {target!s}. Use a model for that pair "
                "(e.g. MarianTranslator.builder().model_id('inference4j/opus-mt-en-fr')) or a multilingual one."
            )
        if target is None:
            raise ConfigurationError(
                f"This multilingual Marian model needs a target language: translate(text, target=...) with one of "
                f"{', '.join(codes[:20])}."
            )
        if isinstance(target, str) and _TARGET_TOKEN.match(target):
            if self.tokenizer.token_to_id(target) is not None:
                return f"{target} "
            wanted = []
        else:
            lang = Language.of(target)
            wanted = [lang.iso3_code, lang.iso_code]
        for code in wanted:
            if code in codes:
                return f">>{code}<< "
        raise UnsupportedModelError(
            f"This Marian model cannot translate into {target!s}: it knows the targets {', '.join(codes[:30])}. "
            "Pick one of those or another model."
        )

    def translate(
        self,
        text: str,
        target: Language | str | None = None,
        source: Language | str | None = None,
        on_token: Callable[[str], None] | None = None,
        **overrides: Any,
    ) -> TextOutput:
        """Translate ``text``; ``target`` is needed only for multilingual models."""
        prefix = self.target_prefix(target, source)
        return self._run_formatted(text, on_token, overrides, lambda t: prefix + t)
