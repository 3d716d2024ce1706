"""Which files of a repo one model needs: the ONNX graphs of ONE layout plus config/tokenizer files.

Pure functions over a repo listing (no network): :func:`select_model_files` and the
:class:`_Selection` that :mod:`inference4py.hub.download` and :mod:`inference4py.hub.cache`
act on, with the message listing what was found when no layout is complete.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from inference4py.errors import ModelFilesMissingError

#: Config, tokenizer and generation files fetched with every model (when present),
#: from the repo root and from the model's own folder.  ``*.spm`` files too.
SUPPORT_FILES: frozenset[str] = frozenset(
    {
        "config.json",
        "generation_config.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "special_tokens_map.json",
        "added_tokens.json",
        "vocab.json",
        "merges.txt",
        "spiece.model",
        "tokenizer.model",
        "sentencepiece.bpe.model",
        "chat_template.jinja",
        "chat_template.json",  # processors' template (vision-language repos); the tokenizer reads it
        "preprocessor_config.json",
        "processor_config.json",  # image processors (image tokens per image); genai's multimodal processor
        "normalizer.json",
        "genai_config.json",
        "inference4py.json",
        # sentence-transformers: the module list and the Transformer module's settings
        "modules.json",
        "sentence_bert_config.json",
    }
)

#: File-name suffixes of the precision variants exported next to the full-precision
#: graphs (transformers.js / optimum naming: ``model_fp16.onnx``, ...).
KNOWN_VARIANTS: tuple[str, ...] = ("fp16", "quantized", "q4", "q4f16", "int8", "uint8", "bnb4")

# Graph sets in order of preference; names without ".onnx" and without variant suffix.
_LAYOUTS: tuple[tuple[str, ...], ...] = (
    ("model",),
    ("encoder_model", "decoder_model_merged"),
    ("encoder_model", "decoder_model", "decoder_with_past_model"),
    ("vision_encoder", "embed_tokens", "decoder_model_merged"),  # vision-language parts (onnx-community)
    ("decoder_model_merged",),
    # Older or cache-less optimum exports, only when nothing above is present.
    ("decoder_model", "decoder_with_past_model"),
    ("encoder_model", "decoder_model"),
    ("decoder_model",),
)
_ONNX_SUBFOLDER = "onnx"
# sentence-transformers saves module i of modules.json in "<i>_<Name>/" (only its config is needed)
_ST_MODULE_CONFIG = re.compile(r"^\d+_[A-Za-z]\w*/config\.json$")
_GENAI_CONFIG = "genai_config.json"
_DATA_SUFFIXES = ("_data", ".data")


@dataclass(frozen=True)
class _Selection:
    files: list[str]  # repo-relative paths, sorted
    folder: str  # the model folder inside the repo ("" = root); genai sub-folders only
    layout: str  # human-readable, for messages and logs
    genai_config: str | None  # path of the genai_config.json that drives the layout


def select_model_files(
    repo_files: Sequence[str],
    variant: str | None = None,
    *,
    genai_config: Mapping[str, Any] | None = None,
) -> list[str]:
    """Pick the files one model needs from a repo listing.

    The ONNX graphs of one layout are chosen, in this order:

    1. a genai folder at the root (``genai_config.json``): the graphs it names
       (all root ``*.onnx`` when ``genai_config`` is not given);
    2. root ``model.onnx``;
    3. root ``encoder_model.onnx`` + ``decoder_model_merged.onnx``;
    4. root ``encoder_model.onnx`` + ``decoder_model.onnx`` + ``decoder_with_past_model.onnx``;
    5. root ``decoder_model_merged.onnx``
       (then older exports: ``decoder_model`` + ``decoder_with_past_model``,
       ``encoder_model`` + ``decoder_model``, ``decoder_model``);
    6. a genai sub-folder (when there are several, ``variant`` names one, e.g.
       ``"cpu-int4-rtn-block-32-acc-level-4"``);
    7. the ``onnx/`` sub-folder of transformers.js repos, same order as 2-5.

    ``variant`` selects precision variants by suffix (``"fp16"`` ->
    ``model_fp16.onnx``); None (or ``"fp32"``) means the full-precision files.
    The external-data files of the chosen graphs (``<name>.onnx_data``,
    ``<name>.onnx.data``, ``<name>.onnx_data_*``) and the config/tokenizer files
    in :data:`SUPPORT_FILES` (plus ``*.spm``) come along, and with ``modules.json`` the
    sentence-transformers module configs (``1_Pooling/config.json``, ...).

    Args:
        repo_files: Repo-relative paths with ``/`` separators, e.g. from
            ``HfApi().list_repo_files``.
        variant: Precision variant suffix or genai folder name.
        genai_config: The parsed ``genai_config.json`` of the genai folder, when
            known; its ``filename`` entries name the graphs to take.

    Returns:
        The selected paths, sorted.

    Raises:
        ModelFilesMissingError: no complete ONNX layout is in the listing; the
            message lists what was found and what is expected.

    Example:
        >>> select_model_files(["README.md", "config.json", "model.onnx", "model.onnx_data",
        ...                     "onnx/model_fp16.onnx"])
        ['config.json', 'model.onnx', 'model.onnx_data']
    """
    return _select(repo_files, variant, genai_config=genai_config).files


def _select(
    repo_files: Sequence[str],
    variant: str | None,
    *,
    genai_config: Mapping[str, Any] | None = None,
    source: str = "the repository",
) -> _Selection:
    files = sorted({f.replace("\\", "/").lstrip("/") for f in repo_files})
    present = set(files)
    variant = _normalize_variant(variant)
    genai_folders = sorted(posixpath.dirname(f) for f in files if posixpath.basename(f) == _GENAI_CONFIG)

    def finish(folder: str, graphs: list[str], layout: str, genai: str | None = None) -> _Selection:
        chosen = set(graphs)
        for graph in graphs:
            chosen.update(_data_files(graph, files))
        for f in files:
            if posixpath.dirname(f) in {"", folder} and _is_support_file(f):
                chosen.add(f)
        if "modules.json" in chosen:  # sentence-transformers' per-module settings (1_Pooling/config.json, ...)
            chosen.update(f for f in files if _ST_MODULE_CONFIG.match(f))
        return _Selection(sorted(chosen), folder, layout, genai)

    # 1. A genai folder at the root: its config is authoritative.
    if variant is None and "" in genai_folders:
        graphs = _genai_graphs("", files, genai_config, source)
        if graphs:
            return finish("", graphs, "onnxruntime-genai folder", _GENAI_CONFIG)

    # 2-5. The optimum / inference4j layouts at the root.
    found = _find_layout("", present, variant)
    if found is not None:
        return finish("", found, " + ".join(found))

    # 6. genai sub-folders (e.g. microsoft/Phi-3-mini-4k-instruct-onnx).
    sub_genai = [g for g in genai_folders if g]
    candidates = sub_genai if variant is None else [g for g in sub_genai if variant in {g, posixpath.basename(g)}]
    if len(candidates) == 1:
        folder = candidates[0]
        graphs = _genai_graphs(folder, files, genai_config, source)
        if graphs:
            return finish(folder, graphs, f"onnxruntime-genai folder {folder}/", f"{folder}/{_GENAI_CONFIG}")
    elif len(candidates) > 1:
        listing = ", ".join(repr(g) for g in candidates)
        raise ModelFilesMissingError(
            f"{source.capitalize()} holds several onnxruntime-genai models ({listing}); "
            "choose one with variant=<folder>, e.g. variant=" + repr(posixpath.basename(candidates[0])) + ".",
            missing=[],
        )

    # 7. The onnx/ sub-folder of transformers.js repos.
    found = _find_layout(_ONNX_SUBFOLDER, present, variant)
    if found is not None:
        return finish("", found, " + ".join(found))

    raise ModelFilesMissingError(_no_layout_message(files, variant, sub_genai, source), missing=["model.onnx"])


def _normalize_variant(variant: str | None) -> str | None:
    if variant is None:
        return None
    variant = variant.strip().strip("/")
    if variant in {"", "fp32"}:
        return None
    return variant


def _graph_name(folder: str, base: str, variant: str | None) -> str:
    name = f"{base}.onnx" if variant is None else f"{base}_{variant}.onnx"
    return f"{folder}/{name}" if folder else name


def _find_layout(folder: str, present: set[str], variant: str | None) -> list[str] | None:
    for layout in _LAYOUTS:
        graphs = [_graph_name(folder, base, variant) for base in layout]
        if all(g in present for g in graphs):
            return graphs
    return None


def _data_files(graph: str, files: Sequence[str]) -> list[str]:
    exact = {graph + suffix for suffix in _DATA_SUFFIXES}
    return [f for f in files if f in exact or f.startswith(graph + "_data_")]


def _is_support_file(path: str) -> bool:
    name = posixpath.basename(path)
    return name in SUPPORT_FILES or name.endswith(".spm")


def _genai_graphs(folder: str, files: Sequence[str], genai_config: Mapping[str, Any] | None, source: str) -> list[str]:
    """The graphs of a genai folder: those its config names, else all its *.onnx."""
    in_folder = [f for f in files if posixpath.dirname(f) == folder and f.endswith(".onnx")]
    if genai_config is None:
        return in_folder
    named = sorted({posixpath.join(folder, name) for name in _genai_filenames(genai_config.get("model", {}))})
    missing = [g for g in named if g not in set(files)]
    if missing:
        raise ModelFilesMissingError(
            f"{folder or '.'}/{_GENAI_CONFIG} in {source} names ONNX files that are not there: " + ", ".join(missing),
            missing=missing,
        )
    return named or in_folder


def _genai_filenames(node: Any) -> Iterator[str]:
    """Every ``"filename": "*.onnx"`` entry of genai_config.json's ``model`` section."""
    if isinstance(node, Mapping):
        for key, value in node.items():
            if key == "filename" and isinstance(value, str) and value.endswith(".onnx"):
                yield value
            else:
                yield from _genai_filenames(value)
    elif isinstance(node, list):
        for item in node:
            yield from _genai_filenames(item)


_VARIANT_RE = re.compile(
    r"^(?:onnx/)?(?:model|encoder_model|decoder_model|decoder_model_merged|decoder_with_past_model)_(\w+)\.onnx$"
)


def _no_layout_message(files: list[str], variant: str | None, genai_folders: list[str], source: str) -> str:
    onnx_files = [f for f in files if f.endswith(".onnx")]
    wanted = "" if variant is None else f" for variant {variant!r}"
    lines = [f"No ONNX model{wanted} found in {source}."]
    if onnx_files:
        shown = ", ".join(onnx_files[:15]) + (f", ... ({len(onnx_files)} in all)" if len(onnx_files) > 15 else "")
        lines.append(f"ONNX files found: {shown}.")
    else:
        shown = ", ".join(files[:15]) + (f", ... ({len(files)} files in all)" if len(files) > 15 else "")
        lines.append(f"No .onnx file at all; files found: {shown or 'none'}.")
    lines.append(
        "Expected one of: model.onnx; encoder_model.onnx + decoder_model_merged.onnx; "
        "encoder_model.onnx + decoder_model.onnx + decoder_with_past_model.onnx; "
        "decoder_model_merged.onnx; a folder with genai_config.json; "
        "or the same names under onnx/."
    )
    variants = sorted({m.group(1) for f in onnx_files if (m := _VARIANT_RE.match(f))})
    if variants or genai_folders:
        choices = variants + [posixpath.basename(g) for g in genai_folders]
        lines.append("Available variants: " + ", ".join(choices) + " (pass variant=...).")
    elif not onnx_files:
        lines.append(
            "If this is a PyTorch/safetensors model, export it first, e.g. "
            "`optimum-cli export onnx --model <id> <folder>`, and pass the folder."
        )
    return " ".join(lines)
