"""What every peer shares: the generation settings, one timed generation, prompt rendering.

A peer module exposes ``load(spec) -> Peer``: a ``Peer`` has ``generate(max_new_tokens,
setting) -> Timed`` (the full user path: prompt text/messages in, token ids out, EOS
suppressed so every peer makes exactly ``max_new_tokens`` tokens) and
``prefill(max_new_tokens=1)`` style timing through ``generate_from_ids``.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

# Sampling settings shared by every peer (transformers' names).
SETTINGS: dict[str, dict[str, Any]] = {
    "greedy": {"do_sample": False},
    "sample": {"do_sample": True, "temperature": 0.8, "top_k": 50, "top_p": 0.9, "seed": 1234},
    "beam4": {"do_sample": False, "num_beams": 4},
}


class Unsupported(Exception):
    """The peer cannot run this model or setting (reported, not fatal)."""


@dataclass
class Timed:
    """One generation: when it started, when each token was available, the ids."""

    started: float
    token_times: list[float] = field(default_factory=list)
    token_ids: list[int] = field(default_factory=list)
    ended: float = 0.0
    prompt_tokens: int = 0

    def tick(self, token: int) -> None:
        self.token_times.append(time.perf_counter())
        self.token_ids.append(int(token))

    def summary(self) -> dict[str, Any]:
        end = self.ended or (self.token_times[-1] if self.token_times else time.perf_counter())
        n = len(self.token_ids)
        first = self.token_times[0] if n else end
        decode_span = (self.token_times[-1] - first) if n > 1 else 0.0
        return {
            "prompt_tokens": self.prompt_tokens,
            "new_tokens": n,
            "ttft_s": first - self.started,
            "total_s": end - self.started,
            "decode_tps": (n - 1) / decode_span if decode_span > 0 else None,
            "ms_per_token": 1000.0 * (end - self.started) / n if n else None,
            "ids_head": self.token_ids[:32],
        }


@dataclass
class Peer:
    """A loaded peer: ``generate`` takes the prompt of the spec, ``generate_ids`` pre-tokenized ids."""

    generate: Callable[[int, str], Timed]
    generate_ids: Callable[[Sequence[int], int, str], Timed]
    prompt_ids: Callable[[], list[int]]
    info: dict[str, Any] = field(default_factory=dict)


def read_json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def eos_ids(folder: Path) -> list[int]:
    """EOS ids of a model folder (generation_config.json, then config.json, then genai_config.json)."""
    for name in ("generation_config.json", "config.json"):
        value = read_json(folder / name).get("eos_token_id")
        if value is not None:
            return list(value) if isinstance(value, list) else [int(value)]
    value = read_json(folder / "genai_config.json").get("model", {}).get("eos_token_id")
    if value is not None:
        return list(value) if isinstance(value, list) else [int(value)]
    return []


def chat_template(folder: Path) -> str | None:
    jinja = folder / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8")
    return read_json(folder / "tokenizer_config.json").get("chat_template")


def prompt_encoder(folder: Path, prompt: dict[str, Any]) -> Callable[[], list[int]]:
    """``encode() -> ids`` with the ``tokenizers`` library and jinja2 alone (what a bare loop would do).

    The tokenizer and template are loaded once; each call renders and encodes the prompt.
    """
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    if "text" in prompt:
        text = prompt["text"]
        return lambda: tok.encode(text).ids
    import jinja2

    source = chat_template(folder)
    if source is None:
        raise Unsupported(f"{folder} has no chat template")
    template = jinja2.Environment(trim_blocks=True, lstrip_blocks=True).from_string(source)
    tc = read_json(folder / "tokenizer_config.json")
    special = {k: (v if isinstance(v, str) else (v or {}).get("content")) for k, v in tc.items()
               if k in ("bos_token", "eos_token")}
    messages = prompt["messages"]

    def encode() -> list[int]:
        text = template.render(messages=messages, add_generation_prompt=True, **special)
        # A rendered chat template already holds its special tokens (transformers: add_special_tokens=False).
        return tok.encode(text, add_special_tokens=False).ids

    return encode


def cpu_flags() -> list[str]:
    """The SIMD flags a CPU kernel may choose by (avx, avx2, avx512*, fma, f16c, vnni, bf16, amx), from
    /proc/cpuinfo; empty when it cannot be read. Light: OpenVINO's venv imports it too."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="ascii", errors="replace")
    except OSError:
        return []
    for line in text.splitlines():
        if line.startswith("flags"):
            wanted = ("avx", "fma", "f16c", "vnni", "bf16", "amx")
            return sorted({f for f in line.split(":", 1)[1].split() if f.startswith(wanted) or "vnni" in f})
    return []

