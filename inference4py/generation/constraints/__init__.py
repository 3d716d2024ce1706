"""Constrained decoding: llguidance matchers -> token bitmask -> one more logits processor.

- :mod:`~inference4py.generation.constraints.grammar`: the constraint kinds compiled and checked
  (:func:`compile_grammar`), before any model is involved;
- :mod:`~inference4py.generation.constraints.tokenizer`: the llguidance tokenizer of a model
  (:func:`llg_tokenizer`), built once and cached;
- :mod:`~inference4py.generation.constraints.processor`: :class:`Constraint` and
  :class:`ConstraintProcessor`, the mask applied last among the logits processors.
"""

from inference4py.generation.constraints.grammar import ConstraintKind as ConstraintKind
from inference4py.generation.constraints.grammar import compile_grammar as compile_grammar
from inference4py.generation.constraints.processor import Constraint as Constraint
from inference4py.generation.constraints.processor import ConstraintProcessor as ConstraintProcessor
from inference4py.generation.constraints.tokenizer import llg_tokenizer as llg_tokenizer

__all__ = ["ConstraintKind", "Constraint", "ConstraintProcessor", "compile_grammar", "llg_tokenizer"]
