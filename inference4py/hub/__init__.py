"""Model id or local path -> local model folder.

A model is either a local folder, returned as it is, or a Hugging Face Hub repo
id (``"org/name"``).  Repos are fetched with huggingface_hub into the standard
shared cache (``~/.cache/huggingface/hub``), so the files are shared with
transformers, optimum and every other tool using that cache.  Only the files the
model needs are downloaded: the config/tokenizer files plus the ONNX graphs of
ONE layout (see :func:`select_model_files`), never every quantized variant a
repo happens to hold.

Offline mode (``HF_HUB_OFFLINE=1`` or ``INFERENCE4PY_OFFLINE=1``, read at call
time, see :mod:`inference4py.env`) and ``local_files_only=True`` serve models
from the cache only.  When the Hub cannot be reached the cache is used as a
fallback.

:mod:`inference4py.hub.upload` is the other way: a folder to a repo, one commit
(``inference4py.push`` adds the model card).

Example:
    >>> from inference4py.hub import resolve_model_folder
    >>> folder = resolve_model_folder("inference4j/gpt2")  # doctest: +SKIP
    >>> sorted(p.name for p in folder.iterdir())  # doctest: +SKIP
    ['config.json', 'generation_config.json', 'merges.txt', 'model.onnx', ...]
"""

from inference4py.hub.files import KNOWN_VARIANTS as KNOWN_VARIANTS
from inference4py.hub.files import SUPPORT_FILES as SUPPORT_FILES
from inference4py.hub.files import select_model_files as select_model_files
from inference4py.hub.resolve import local_model_folder as local_model_folder
from inference4py.hub.resolve import pull as pull
from inference4py.hub.resolve import resolve_checkpoint as resolve_checkpoint
from inference4py.hub.resolve import resolve_model_folder as resolve_model_folder
from inference4py.hub.upload import PushResult as PushResult

__all__ = [
    "SUPPORT_FILES",
    "KNOWN_VARIANTS",
    "resolve_checkpoint",
    "resolve_model_folder",
    "PushResult",
    "local_model_folder",
    "pull",
    "select_model_files",
]
