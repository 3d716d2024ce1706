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

Example:
    >>> from inference4py.hub import resolve_model_folder
    >>> folder = resolve_model_folder("inference4j/gpt2")  # doctest: +SKIP
    >>> sorted(p.name for p in folder.iterdir())  # doctest: +SKIP
    ['config.json', 'generation_config.json', 'merges.txt', 'model.onnx', ...]
"""

from inference4py.hub.cache import _from_cache as _from_cache
from inference4py.hub.cache import _local_files as _local_files
from inference4py.hub.cache import _read_json as _read_json
from inference4py.hub.download import _download_json as _download_json
from inference4py.hub.download import _escape_pattern as _escape_pattern
from inference4py.hub.download import _list_repo_files as _list_repo_files
from inference4py.hub.download import _progress_bars as _progress_bars
from inference4py.hub.download import _resolve_repo as _resolve_repo
from inference4py.hub.download import logger as logger
from inference4py.hub.failures import _HTTP_CLIENTS as _HTTP_CLIENTS
from inference4py.hub.failures import _exception_types as _exception_types
from inference4py.hub.failures import _http_client_errors as _http_client_errors
from inference4py.hub.failures import _hub_errors as _hub_errors
from inference4py.hub.failures import _status_code as _status_code
from inference4py.hub.failures import _unreachable_errors as _unreachable_errors
from inference4py.hub.files import _DATA_SUFFIXES as _DATA_SUFFIXES
from inference4py.hub.files import _GENAI_CONFIG as _GENAI_CONFIG
from inference4py.hub.files import _LAYOUTS as _LAYOUTS
from inference4py.hub.files import _ONNX_SUBFOLDER as _ONNX_SUBFOLDER
from inference4py.hub.files import _VARIANT_RE as _VARIANT_RE
from inference4py.hub.files import KNOWN_VARIANTS as KNOWN_VARIANTS
from inference4py.hub.files import SUPPORT_FILES as SUPPORT_FILES
from inference4py.hub.files import _data_files as _data_files
from inference4py.hub.files import _find_layout as _find_layout
from inference4py.hub.files import _genai_filenames as _genai_filenames
from inference4py.hub.files import _genai_graphs as _genai_graphs
from inference4py.hub.files import _graph_name as _graph_name
from inference4py.hub.files import _is_support_file as _is_support_file
from inference4py.hub.files import _no_layout_message as _no_layout_message
from inference4py.hub.files import _normalize_variant as _normalize_variant
from inference4py.hub.files import _select as _select
from inference4py.hub.files import _Selection as _Selection
from inference4py.hub.files import select_model_files as select_model_files
from inference4py.hub.resolve import _looks_like_path as _looks_like_path
from inference4py.hub.resolve import _validate_repo_id as _validate_repo_id
from inference4py.hub.resolve import local_model_folder as local_model_folder
from inference4py.hub.resolve import pull as pull
from inference4py.hub.resolve import resolve_model_folder as resolve_model_folder

__all__ = [
    "SUPPORT_FILES",
    "KNOWN_VARIANTS",
    "resolve_model_folder",
    "local_model_folder",
    "pull",
    "select_model_files",
]
