"""Whisper on a vocabulary whose special and timestamp tokens sit below the ordinary ones (issue 17's bug).

The tiny fixture's ids are relabelled at test time: ``<|0.00|>`` ... ``<|30.00|>`` become ids 0-1500,
the special tokens (``<|endoftext|>`` ... ``<|notimestamps|>``) 1501-1607 and the ordinary tokens
1608-2007, so ``<|notimestamps|> + 1`` is an ordinary token and the timestamps are not the last ids.
The decoder's embedding rows and output columns are permuted the same way, so the relabelled model
is the same function: it must give transformers' references with every id relabelled.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from inference4py import WhisperSpeechModel
from inference4py.audio import SAMPLE_RATE
from inference4py.errors import UnsupportedModelError
from inference4py.speech import WhisperTimestampRules, split_segments
from inference4py.speech.timestamps import whisper_rules
from inference4py.speech.vocab import _timestamp_tokens
from inference4py.tokenization import load_tokenizer
from tests.conftest import MODELS
from tests.speech.test_whisper import CASES, IDS, REF, clips

VOCAB = 2008
N_TEXT = IDS["eot"]  # ordinary tokens: ids below <|endoftext|> in the original layout
N_SPECIAL = IDS["timestamp_begin"] - IDS["eot"]  # <|endoftext|> ... <|notimestamps|>
N_STAMPS = VOCAB - IDS["timestamp_begin"]  # <|0.00|> ... <|30.00|>


def _permutation() -> np.ndarray:
    """``new[old]``: timestamps first, then the special tokens, then the ordinary tokens."""
    new = np.empty(VOCAB, dtype=np.int64)
    tb = IDS["timestamp_begin"]
    new[tb:] = np.arange(N_STAMPS)
    new[N_TEXT:tb] = N_STAMPS + np.arange(N_SPECIAL)
    new[:N_TEXT] = N_STAMPS + N_SPECIAL + np.arange(N_TEXT)
    return new


NEW = _permutation()


def relabel(value: Any) -> Any:
    """Every id in a JSON value of generation_config.json / config.json, relabelled."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int):
        return int(NEW[value])
    if isinstance(value, list):
        return [relabel(v) for v in value]
    if isinstance(value, dict):
        return {k: relabel(v) for k, v in value.items()}
    return value


_ID_KEYS = (
    "begin_suppress_tokens",
    "bos_token_id",
    "decoder_start_token_id",
    "eos_token_id",
    "forced_decoder_ids",
    "lang_to_id",
    "no_timestamps_token_id",
    "pad_token_id",
    "prev_sot_token_id",
    "suppress_tokens",
    "task_to_id",
)


def _relabel_config(path: Path) -> None:
    data = json.loads(path.read_text(encoding="utf-8"))
    for key in _ID_KEYS:
        if key in data:
            if key == "forced_decoder_ids" and data[key]:
                data[key] = [[pos, relabel(tok)] for pos, tok in data[key]]
            else:
                data[key] = relabel(data[key])
    path.write_text(json.dumps(data), encoding="utf-8")


def build_relabelled(folder: Path) -> Path:
    """A copy of the tiny Whisper fixture in ``folder`` with the ids relabelled by :data:`NEW`."""
    shutil.copytree(MODELS / "whisper", folder)
    for name in ("vocab.json", "merges.txt", "added_tokens.json"):  # tokenizer.json says it all
        (folder / name).unlink()
    tok = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
    tok["model"]["vocab"] = {k: int(NEW[v]) for k, v in tok["model"]["vocab"].items()}
    # tokenizers numbers added tokens after the model's vocabulary: ids below it must be in the vocabulary too
    tok["model"]["vocab"].update({t["content"]: int(NEW[t["id"]]) for t in tok["added_tokens"]})
    tok["added_tokens"] = sorted(({**t, "id": int(NEW[t["id"]])} for t in tok["added_tokens"]), key=lambda t: t["id"])
    for special in tok["post_processor"]["special_tokens"].values():
        special["ids"] = [int(NEW[i]) for i in special["ids"]]
    (folder / "tokenizer.json").write_text(json.dumps(tok), encoding="utf-8")
    settings = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    settings["added_tokens_decoder"] = {str(NEW[int(k)]): v for k, v in settings["added_tokens_decoder"].items()}
    (folder / "tokenizer_config.json").write_text(json.dumps(settings), encoding="utf-8")
    _relabel_config(folder / "generation_config.json")
    _relabel_config(folder / "config.json")
    path = folder / "onnx" / "decoder_model_merged.onnx"
    model = onnx.load(str(path))
    old = np.argsort(NEW)  # old[new]
    for init in model.graph.initializer:
        dims = tuple(init.dims)
        if dims == (VOCAB, 32):  # token embedding: rows are ids
            init.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(init)[old], init.name))
        elif dims == (32, VOCAB):  # output projection: columns are ids
            init.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(init)[:, old], init.name))
    onnx.save(model, str(path))
    return folder


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return build_relabelled(tmp_path_factory.mktemp("whisper-relabelled") / "whisper")


@pytest.fixture(scope="module")
def asr(folder):
    with WhisperSpeechModel.builder().model_path(folder).build() as model:
        yield model


def test_the_fixture_is_relabelled(asr):
    tok = asr.tokenizer
    assert tok.token_to_id("<|0.00|>") == 0 and tok.token_to_id("<|30.00|>") == 1500
    notimestamps = tok.token_to_id("<|notimestamps|>")
    assert notimestamps == 1607 and asr._parts.vocab.no_timestamps == notimestamps
    assert tok.id_to_token(notimestamps + 1) == tok.id_to_token(0 + 1608)  # an ordinary token follows it
    assert not tok.id_to_token(notimestamps + 1).startswith("<|")
    assert asr._parts.vocab.eot == tok.token_to_id("<|endoftext|>") == 1501


def _run(model, case, **extra):
    s = case["settings"]
    options = {k: s[k] for k in ("max_new_tokens", "num_beams") if k in s}
    pieces: list[str] = []
    audio = clips()[case["clip"]]
    result = model.transcribe(
        (audio, SAMPLE_RATE),
        language=s.get("language"),
        task=s.get("task"),
        timestamps=s.get("return_timestamps", False),
        on_token=pieces.append,
        **options,
        **extra,
    )
    return result, pieces, audio.size / SAMPLE_RATE


NO_TS = [n for n, c in CASES.items() if not c["settings"].get("return_timestamps") and "generation_config" not in c]
WITH_TS = [n for n, c in CASES.items() if c["settings"].get("return_timestamps") and "generation_config" not in c]


@pytest.mark.parametrize("name", NO_TS)
def test_without_timestamps_no_token_is_a_timestamp(asr, name):
    case = CASES[name]
    result, pieces, duration = _run(asr, case)
    ids = list(result.token_ids)
    assert ids == [int(NEW[t]) for t in case["token_ids"]]  # the same ids as transformers', relabelled
    assert result.text == asr.tokenizer.decode(ids, skip_special_tokens=True) == case["text"]
    assert "".join(pieces) == result.text
    windows = len(case["windows"])
    assert len(result.segments) == windows  # one segment per 30 s window
    max_new = case["settings"].get("max_new_tokens", 448)  # default: max_length 448 of generation_config.json
    for i, seg in enumerate(result.segments):
        assert len(seg.token_ids) <= max_new
        assert seg.start == pytest.approx(30.0 * i)
        assert seg.end == pytest.approx(min(30.0 * (i + 1), duration))  # the window, clipped to the audio
        assert seg.text == asr.tokenizer.decode(list(seg.token_ids), skip_special_tokens=True)
    assert sum(len(s.token_ids) for s in result.segments) == len(ids)


@pytest.mark.parametrize("name", WITH_TS)
def test_with_timestamps_the_range_is_the_tokenizers(asr, name):
    case = CASES[name]
    result, pieces, duration = _run(asr, case)
    assert list(result.token_ids) == [int(NEW[t]) for t in case["token_ids"]]
    assert result.text == case["text"]
    assert "".join(pieces) == result.text
    assert len(result.segments) == len(case["segments"])
    for got, want in zip(result.segments, case["segments"]):
        assert list(got.token_ids) == [int(NEW[t]) for t in want["token_ids"]]
        assert got.text == want["text"]
        assert got.start == pytest.approx(min(want["start"], duration), abs=1e-6)
        assert got.end == pytest.approx(min(want["end"], duration), abs=1e-6)
        assert got.end <= duration
        # the segment's timestamps are the tokenizer's <|x.xx|> tokens (ids 0-1500 here)
        stamps = [t for t in got.token_ids if re.fullmatch(r"<\|\d+\.\d\d\|>", asr.tokenizer.id_to_token(t))]
        assert stamps and all(0 <= t <= 1500 for t in stamps)
        assert stamps == [t for t in got.token_ids if t <= 1500]


def test_timestamp_rules_use_the_tokenizers_range(asr):
    (rules,) = [p for p in whisper_rules(asr._parts.vocab, 4, True) if isinstance(p, WhisperTimestampRules)]
    assert rules.timestamp_begin == asr.tokenizer.token_to_id("<|0.00|>") == 0
    assert rules.timestamp_end == 1501
    assert not [p for p in whisper_rules(asr._parts.vocab, 4, False) if isinstance(p, WhisperTimestampRules)]


def test_timestamp_tokens_are_looked_up_by_text(folder):
    tok = load_tokenizer(folder)
    assert _timestamp_tokens(tok) == (0, 1501)
    standard = load_tokenizer(MODELS / "whisper")
    assert _timestamp_tokens(standard) == (IDS["timestamp_begin"], N_STAMPS)


def test_a_vocabulary_without_timestamp_tokens_refuses_timestamps(tmp_path):
    folder = tmp_path / "whisper"
    shutil.copytree(MODELS / "whisper", folder)
    tok = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
    # rename <|0.00|> ... so that no timestamp token is left (the ids stay, as ordinary added tokens)
    for t in tok["added_tokens"]:
        if t["id"] >= IDS["timestamp_begin"]:
            t["content"] = f"<|extra_{t['id']}|>"
    (folder / "tokenizer.json").write_text(json.dumps(tok), encoding="utf-8")
    for name in ("vocab.json", "merges.txt", "added_tokens.json", "tokenizer_config.json"):
        (folder / name).unlink()
    assert _timestamp_tokens(load_tokenizer(folder)) is None
    with WhisperSpeechModel.builder().model_path(folder).build() as model:
        model.transcribe((clips()["tone"], SAMPLE_RATE), language="en", max_new_tokens=4)  # no timestamps: fine
        with pytest.raises(UnsupportedModelError, match=r"<\|0\.00\|>.*timestamps=False"):
            model.transcribe((clips()["tone"], SAMPLE_RATE), language="en", timestamps=True, max_new_tokens=4)
    with pytest.raises(UnsupportedModelError, match=r"<\|0\.00\|>"):
        WhisperSpeechModel.builder().model_path(folder).timestamps().build()


def test_reference_ids_are_relabelled_consistently():
    assert sorted(NEW.tolist()) == list(range(VOCAB))
    assert REF["special_ids"]["notimestamps"] + 1 == IDS["timestamp_begin"]  # the standard layout
    assert int(NEW[IDS["notimestamps"]]) + 1 == 1608  # ... and in the relabelled one an ordinary token follows


def test_split_segments_without_timestamps_and_with_a_bounded_range():
    # timestamps off: ids above <|notimestamps|> are text, the window is one segment
    segs, advance = split_segments([1700, 1608, 1900], timestamp_begin=None, seek=3000, window_frames=850)
    assert [(s.start, s.end, s.tokens) for s in segs] == [(30.0, 38.5, (1700, 1608, 1900))] and advance == 850
    # timestamps 0-1500 below the text: 1608+ are text, a pair of stamps closes a segment
    segs, advance = split_segments(
        [50, 1700, 100, 100, 1800, 200], timestamp_begin=0, timestamp_end=1501, seek=0, window_frames=3000
    )
    assert [(s.start, s.end) for s in segs] == [(1.0, 2.0), (2.0, 4.0)] and advance == 3000


def test_a_tokenizer_that_does_not_list_the_timestamps_keeps_openais_layout(tmp_path):
    # Many exports (CTranslate2's, older HF ones) leave <|0.00|>... out of tokenizer.json: the ids after
    # <|notimestamps|> up to the model's vocabulary are then timestamps the tokenizer does not know.
    folder = tmp_path / "unlisted"
    shutil.copytree(MODELS / "whisper", folder)
    tok = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
    tok["added_tokens"] = [t for t in tok["added_tokens"] if t["id"] < IDS["timestamp_begin"]]
    (folder / "tokenizer.json").write_text(json.dumps(tok), encoding="utf-8")
    for name in ("vocab.json", "merges.txt", "added_tokens.json", "tokenizer_config.json"):
        (folder / name).unlink()
    tokenizer = load_tokenizer(folder)
    assert _timestamp_tokens(tokenizer) is None and tokenizer.id_to_token(IDS["timestamp_begin"]) is None
    audio = (clips()["tone"], SAMPLE_RATE)
    with WhisperSpeechModel.builder().model_path(MODELS / "whisper").build() as listed:
        want = listed.transcribe(audio, language="en", timestamps=True, max_new_tokens=12)
    with WhisperSpeechModel.builder().model_path(folder).build() as unlisted:
        got = unlisted.transcribe(audio, language="en", timestamps=True, max_new_tokens=12)
    assert list(got.token_ids) == list(want.token_ids)
    assert [(s.start, s.end, s.token_ids) for s in got.segments] == [
        (s.start, s.end, s.token_ids) for s in want.segments
    ]
