"""``load_tokenizer``: which back end a model folder gets, from the files present."""

from __future__ import annotations

from pathlib import Path

from ..errors import ModelFilesMissingError
from .base import Tokenizer
from .fast import _load_tokenizer_json, _load_vocab_merges
from .spm import _load_marian, _load_sentencepiece

__all__ = ["load_tokenizer"]


def load_tokenizer(folder: str | Path) -> Tokenizer:
    """Load the tokenizer of a local model folder.

    Files are tried in this order: Marian's ``source.spm`` + ``target.spm`` +
    ``vocab.json``; ``tokenizer.json``; ``vocab.json`` + ``merges.txt``
    (byte-level BPE, GPT-2 / BART style); ``spiece.model`` or
    ``tokenizer.model`` (sentencepiece).  ``tokenizer_config.json``,
    ``special_tokens_map.json`` and ``chat_template.jinja`` are read when present.

    Args:
        folder: A local folder (use :mod:`inference4py.hub` for hub ids).

    Returns:
        A :class:`Tokenizer` whose ids equal transformers' ``AutoTokenizer``'s.

    Raises:
        ModelNotFoundError: ``folder`` does not exist.
        ModelFilesMissingError: No tokenizer files in the folder.
        ModelLoadError: A tokenizer file is corrupt.

    Example:
        >>> tok = load_tokenizer("models/gpt2")   # doctest: +SKIP
    """
    from ..errors import ModelNotFoundError

    path = Path(folder)
    if not path.is_dir():
        raise ModelNotFoundError(
            f"Tokenizer folder {path} does not exist. Pass the folder that holds tokenizer.json "
            "(or vocab.json + merges.txt, or a sentencepiece model)."
        )

    def has(name: str) -> bool:
        return (path / name).is_file()

    if has("source.spm") and has("target.spm") and has("vocab.json"):
        return _load_marian(path)
    if has("tokenizer.json"):
        return _load_tokenizer_json(path)
    if has("vocab.json") and has("merges.txt"):
        return _load_vocab_merges(path)
    for name in ("spiece.model", "tokenizer.model", "sentencepiece.bpe.model"):
        if has(name):
            return _load_sentencepiece(path, path / name)

    looked_for = [
        "tokenizer.json",
        "vocab.json + merges.txt",
        "spiece.model",
        "tokenizer.model",
        "source.spm + target.spm + vocab.json",
    ]
    missing = ["tokenizer.json"]
    if has("vocab.json") and not has("merges.txt"):
        missing.append("merges.txt")
    if has("source.spm") or has("target.spm"):
        missing += [n for n in ("source.spm", "target.spm", "vocab.json") if not has(n)]
    raise ModelFilesMissingError(
        f"No tokenizer files in {path}. Looked for: {', '.join(looked_for)}. "
        "Download the tokenizer files of the model into this folder (e.g. "
        "huggingface_hub.snapshot_download(repo_id, allow_patterns=['*.json', '*.txt', '*.model', '*.spm', '*.jinja'])).",
        missing,
    )
