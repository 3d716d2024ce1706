"""Tokenizers and chat templates, matching transformers' ``AutoTokenizer``.

One interface, :class:`Tokenizer`, over two back ends:

* the Rust ``tokenizers`` library, for folders with a ``tokenizer.json`` and for
  GPT-2 style folders with only ``vocab.json`` + ``merges.txt`` (the byte-level
  BPE is rebuilt the way transformers' ``GPT2Converter`` / ``RobertaConverter`` do);
* ``sentencepiece``, for folders with only ``spiece.model`` / ``tokenizer.model``
  (T5, Llama) and for Marian's ``source.spm`` + ``target.spm`` + ``vocab.json``,
  reproducing transformers' slow ``T5Tokenizer`` / ``LlamaTokenizer`` /
  ``MarianTokenizer``.

:func:`load_tokenizer` picks the back end from the files present and reads
``tokenizer_config.json`` (special tokens, ``added_tokens_decoder``,
``add_bos_token`` / ``add_eos_token``, ``clean_up_tokenization_spaces``,
``chat_template``, ``model_max_length``) the way transformers 4.57 does, so that
ids and decoded text equal ``AutoTokenizer``'s for the same files.

One idea per module:

- ``base``: the :class:`Tokenizer` interface, special tokens, chat-template
  selection, ``clean_up_tokenization``;
- ``chat_template``: Jinja chat templates rendered in a sandbox like transformers;
- ``settings``: ``tokenizer_config.json`` (+ special tokens map, added tokens,
  chat templates) resolved with each tokenizer class's defaults;
- ``fast``: the ``tokenizers`` back end (``tokenizer.json``, ``vocab.json`` + ``merges.txt``);
- ``spm``: the ``sentencepiece`` back end (T5, Llama, Marian);
- ``load``: :func:`load_tokenizer`, which back end a folder gets.

jinja2, tokenizers and sentencepiece are imported on first use, never on import.

Example:
    >>> tok = load_tokenizer("path/to/model")            # doctest: +SKIP
    >>> ids = tok.encode("Hello world")                    # doctest: +SKIP
    >>> tok.decode(ids)                                    # doctest: +SKIP
    'Hello world'
"""

from __future__ import annotations

# Re-exported one by one (``X as X``): every name importers take from here, as before.
from .base import Tokenizer as Tokenizer
from .base import clean_up_tokenization as clean_up_tokenization
from .chat_template import render_chat_template as render_chat_template
from .fast import FastTokenizer as FastTokenizer
from .load import load_tokenizer as load_tokenizer

__all__ = ["FastTokenizer", "Tokenizer", "load_tokenizer", "render_chat_template", "clean_up_tokenization"]
