"""``tokenizer_config.json`` and its neighbours, resolved the way transformers 4.57 does.

:class:`_Settings` reads one folder's tokenizer_config.json, special_tokens_map.json
(legacy folders), the added tokens and the chat templates (``chat_template.jinja``,
``additional_chat_templates/``, ``chat_template.json`` or the config's own) into
what every back end needs.  The tokenizer class comes from the config, else from
config.json's ``model_type``; its transformers defaults (special tokens, BOS/EOS
flags, ``add_prefix_space``) fill what the config leaves out.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..errors import ModelLoadError
from .base import _SPECIAL_ATTRS

# Per tokenizer class (name without "Fast"): the defaults transformers' class
# __init__ uses when tokenizer_config.json does not say otherwise.
#   tokens: default special tokens; bos_eos: (add_bos_token, add_eos_token)
#   defaults for classes whose fast __init__ rebuilds the post-processor
#   (LlamaTokenizerFast.update_post_processor and friends); prefix_space: the
#   add_prefix_space default the base class compares the pre-tokenizer against.
_CLASS_DEFAULTS: dict[str, dict[str, Any]] = {
    "GPT2Tokenizer": {
        "tokens": {"unk_token": "<|endoftext|>", "bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>"},
    },
    "Qwen2Tokenizer": {
        "tokens": {"unk_token": "<|endoftext|>", "eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>"},
    },
    "LlamaTokenizer": {
        "tokens": {"unk_token": "<unk>", "bos_token": "<s>", "eos_token": "</s>"},
        "bos_eos": (True, False),
        "prefix_space": None,
    },
    "CodeLlamaTokenizer": {
        "tokens": {"unk_token": "<unk>", "bos_token": "<s>", "eos_token": "</s>"},
        "bos_eos": (True, False),
        "prefix_space": None,
    },
    "GemmaTokenizer": {
        "tokens": {"unk_token": "<unk>", "bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>"},
        "bos_eos": (True, False),
    },
    "CohereTokenizer": {
        "tokens": {"unk_token": "<UNK>", "bos_token": "<BOS_TOKEN>", "eos_token": "<|END_OF_TURN_TOKEN|>"},
        "bos_eos": (True, False),
    },
    "GPTNeoXTokenizer": {
        "tokens": {"unk_token": "<|endoftext|>", "bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>"},
        "bos_eos": (False, False),
    },
    "T5Tokenizer": {
        "tokens": {"eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>"},
    },
    "BartTokenizer": {
        "tokens": {
            "bos_token": "<s>",
            "eos_token": "</s>",
            "sep_token": "</s>",
            "cls_token": "<s>",
            "unk_token": "<unk>",
            "pad_token": "<pad>",
            "mask_token": "<mask>",
        },
    },
    "WhisperTokenizer": {
        "tokens": {"unk_token": "<|endoftext|>", "bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>"},
    },
    "MarianTokenizer": {
        "tokens": {"unk_token": "<unk>", "eos_token": "</s>", "pad_token": "<pad>"},
    },
}
_CLASS_DEFAULTS["RobertaTokenizer"] = _CLASS_DEFAULTS["BartTokenizer"]

# config.json model_type -> tokenizer class, for folders whose
# tokenizer_config.json does not name one (transformers' TOKENIZER_MAPPING_NAMES).
_MODEL_TYPE_TO_CLASS = {
    "gpt2": "GPT2Tokenizer",
    "gpt_bigcode": "GPT2Tokenizer",
    "llama": "LlamaTokenizer",
    "mistral": "LlamaTokenizer",
    "mixtral": "LlamaTokenizer",
    "phi3": "LlamaTokenizer",
    "qwen2": "Qwen2Tokenizer",
    "qwen3": "Qwen2Tokenizer",
    "gemma": "GemmaTokenizer",
    "gemma2": "GemmaTokenizer",
    "gpt_neox": "GPTNeoXTokenizer",
    "t5": "T5Tokenizer",
    "mt5": "T5Tokenizer",
    "bart": "BartTokenizer",
    "mbart": "BartTokenizer",
    "roberta": "RobertaTokenizer",
    "marian": "MarianTokenizer",
    "whisper": "WhisperTokenizer",
}


def _read_json(path: Path) -> Any:
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except json.JSONDecodeError as exc:
        raise ModelLoadError(
            f"{path} is not valid JSON ({exc.msg} at line {exc.lineno}). Download the file again or fix it."
        ) from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise ModelLoadError(f"Cannot read {path}: {exc}. Check the file's permissions and encoding.") from exc


def _token_content(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, Mapping):
        return value.get("content")
    return str(value)


def _resolve_class(folder: Path, config: Mapping[str, Any]) -> str | None:
    name = config.get("tokenizer_class")
    if not name and (folder / "config.json").is_file():
        try:
            model_config = _read_json(folder / "config.json")
        except ModelLoadError:
            model_config = {}
        if isinstance(model_config, Mapping):
            name = model_config.get("tokenizer_class") or _MODEL_TYPE_TO_CLASS.get(
                str(model_config.get("model_type", ""))
            )
    if not name:
        return None
    return str(name).removesuffix("Fast")


class _Settings:
    """tokenizer_config.json (+ special_tokens_map.json, chat templates) resolved like transformers."""

    def __init__(self, folder: Path, backend_added: list[dict[str, Any]] | None) -> None:
        path = folder / "tokenizer_config.json"
        config = _read_json(path) if path.is_file() else {}
        if not isinstance(config, dict):
            raise ModelLoadError(f"{path} must hold a JSON object. Download the file again or fix it.")
        self.config = config
        self.cls = _resolve_class(folder, config)
        defaults = _CLASS_DEFAULTS.get(self.cls or "", {})
        self.class_defaults = defaults

        # added_tokens_decoder: modern configs carry it; legacy folders get it from
        # tokenizer.json's added_tokens and take special tokens from special_tokens_map.json.
        self.added: dict[int, dict[str, Any]] = {}
        if "added_tokens_decoder" in config:
            for idx, tok in (config.get("added_tokens_decoder") or {}).items():
                if isinstance(tok, Mapping):
                    self.added[int(idx)] = dict(tok)
        else:
            stm = folder / "special_tokens_map.json"
            if stm.is_file():
                smap = _read_json(stm)
                if isinstance(smap, Mapping):
                    for key, value in smap.items():
                        if key == "additional_special_tokens" and isinstance(value, list):
                            existing = list(config.get("additional_special_tokens") or [])
                            names = [_token_content(v) for v in existing]
                            for v in value:
                                if _token_content(v) not in names:
                                    existing.append(v)
                            config[key] = existing
                        else:
                            config[key] = value
            for tok in backend_added or []:
                t = dict(tok)
                self.added[int(t.pop("id"))] = t

        self.tokens: dict[str, str | None] = {}
        for attr in _SPECIAL_ATTRS:
            if attr in config:
                self.tokens[attr] = _token_content(config[attr])
            else:
                self.tokens[attr] = defaults.get("tokens", {}).get(attr)
        self.additional = [t for t in (_token_content(v) for v in config.get("additional_special_tokens") or []) if t]
        self.clean_up = bool(config.get("clean_up_tokenization_spaces", False))
        mml = config.get("model_max_length")
        # transformers stores "no limit" as int(1e30)
        self.model_max_length = int(mml) if isinstance(mml, (int, float)) and mml < 1e29 else None

        templates: dict[str, str] = {}
        jinja_file = folder / "chat_template.jinja"
        templates_dir = folder / "additional_chat_templates"
        if jinja_file.is_file():
            templates["default"] = jinja_file.read_text(encoding="utf-8")
        if templates_dir.is_dir():
            for f in sorted(templates_dir.glob("*.jinja")):
                templates[f.stem] = f.read_text(encoding="utf-8")
        chat_template: str | dict[str, str] | None
        if templates:
            chat_template = templates["default"] if list(templates) == ["default"] else templates
        else:
            raw = config.get("chat_template")
            if raw is None and (folder / "chat_template.json").is_file():
                # processors save {"chat_template": ...} in chat_template.json
                raw_json = _read_json(folder / "chat_template.json")
                raw = raw_json.get("chat_template") if isinstance(raw_json, Mapping) else None
            if isinstance(raw, list):
                chat_template = {
                    str(t["name"]): str(t["template"])
                    for t in raw
                    if isinstance(t, Mapping) and "name" in t and "template" in t
                }
            elif isinstance(raw, str):
                chat_template = raw
            else:
                chat_template = None
        self.chat_template = chat_template

    def common_kwargs(self) -> dict[str, Any]:
        return {
            "special_tokens": self.tokens,
            "additional_special_tokens": self.additional,
            "chat_template": self.chat_template,
            "clean_up_tokenization_spaces": self.clean_up,
            "model_max_length": self.model_max_length,
        }

    def flag(self, name: str, default: Any) -> Any:
        value = self.config.get(name, default)
        return default if value is None else value
