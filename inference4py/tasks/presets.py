"""Presets as data: one table per task class, read by the preset methods users call.

A row says which Hub repo a preset loads and what its builder starts with (a chat template, a
prompt format, a language pair); the method keeps inference4j's name::

    TEXT_PRESETS = PresetTable(TextGeneratorBuilder, [Preset("gpt2", "inference4j/gpt2", "GPT-2 (124M).")])

    class OnnxTextGenerator(...):
        builder = TEXT_PRESETS.blank()      # OnnxTextGenerator.builder(): no model chosen
        gpt2 = TEXT_PRESETS.method("gpt2")  # OnnxTextGenerator.gpt2(): the row as a builder

Every builder records the preset's name, so ``repr(OnnxTextGenerator.gpt2())`` shows where it came
from.  Whisper's presets are :mod:`inference4py.tasks.whisper`'s own.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from inference4py.tasks.base import ModelSourceBuilder

__all__ = ["Preset", "PresetMethod", "PresetTable"]

BuilderT = TypeVar("BuilderT", bound=ModelSourceBuilder)

_BLANK_DOC = "A builder with no model chosen: call ``model_id`` or ``model_path``."


@dataclass(frozen=True)
class Preset:
    """One preset.

    Attributes:
        name: The method users call (inference4j's name, e.g. ``"smolLM2"``).
        model_id: The Hub repo holding the model's files (None: the user names one, e.g. a gated model).
        doc: The method's docstring.
        defaults: What the builder starts with, as its constructor's keywords (``chat_template``,
            ``use_chat_template``, ``prompt_formatter``, ``source`` / ``target``...).
    """

    name: str
    model_id: str | None
    doc: str
    defaults: Mapping[str, Any] = field(default_factory=dict)


def preset_builder(make: Callable[..., BuilderT], task: type[Any], row: Preset | None) -> BuilderT:
    """A builder made by ``make`` from ``row`` (None: no model chosen) that builds a ``task``."""
    builder = make() if row is None else make(preset=row.name, model_id=row.model_id, **row.defaults)
    builder._task = task  # the class the method was called on: a subclass builds itself
    return builder


class PresetTable(Generic[BuilderT]):
    """The presets of one task class, and the builder class they make."""

    def __init__(self, make: Callable[..., BuilderT], rows: Sequence[Preset]) -> None:
        self.make = make
        self.rows: dict[str, Preset] = {}
        for row in rows:
            if row.name in self.rows:
                raise ValueError(f"Preset {row.name!r} is in the table twice.")
            self.rows[row.name] = row

    def method(self, name: str) -> PresetMethod[BuilderT]:
        """The class attribute of preset ``name``: ``Task.name()`` gives its builder."""
        return PresetMethod(self.make, self.rows[name])

    def blank(self) -> PresetMethod[BuilderT]:
        """The class attribute ``builder``: ``Task.builder()`` gives a builder with no model chosen."""
        return PresetMethod(self.make, None)


class PresetMethod(Generic[BuilderT]):
    """A preset as a class attribute: reading it gives a no-argument function that makes the builder."""

    def __init__(self, make: Callable[..., BuilderT], row: Preset | None) -> None:
        self.make = make
        self.row = row
        self.__doc__ = _BLANK_DOC if row is None else row.doc  # what help() shows of the class attribute

    def __set_name__(self, owner: type[Any], name: str) -> None:
        expected = "builder" if self.row is None else self.row.name
        if name != expected:
            raise TypeError(f"{owner.__name__}.{name} reads preset {expected!r}: name the attribute {expected}.")

    def __get__(self, obj: object, owner: type[Any]) -> Callable[[], BuilderT]:
        make, row = self.make, self.row

        def preset() -> BuilderT:
            return preset_builder(make, owner, row)

        preset.__name__ = preset.__qualname__ = "builder" if row is None else row.name
        preset.__doc__ = self.__doc__
        return preset
