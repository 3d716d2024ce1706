"""Word timestamps: against transformers' token timestamps and word grouping on the tiny fixture
(references/whisper_words.json, made by tools/fixtures/whisper_words.py), and their parts one by one."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from inference4py import WhisperSpeechModel
from inference4py.audio import SAMPLE_RATE
from inference4py.speech.attention import attention_decoder_files, cross_attention_outputs
from inference4py.speech.probe import default_alignment_heads
from inference4py.speech.words import (
    dynamic_time_warping,
    median_filter,
    merge_punctuations,
    split_words,
)
from tests.conftest import MODELS, load_reference
from tests.speech.test_whisper import clips

REF = load_reference("whisper_words")
DECODER = MODELS / "whisper" / "onnx" / "decoder_model_merged.onnx"


@pytest.fixture(scope="module")
def asr():
    with WhisperSpeechModel.builder().model_path(MODELS / "whisper").build() as model:
        yield model


@pytest.mark.parametrize("name", sorted(REF["cases"]))
def test_words_match_transformers(asr, name):
    s = REF["settings"]
    result = asr.transcribe(
        (clips()[name], SAMPLE_RATE),
        language=s["language"],
        timestamps=s["return_timestamps"],
        max_new_tokens=s["max_new_tokens"],
        word_timestamps=True,
    )
    want_segments = REF["cases"][name]["segments"]
    assert [list(seg.token_ids) for seg in result.segments] == [w["token_ids"] for w in want_segments]
    for seg, want in zip(result.segments, want_segments):
        assert [w.word for w in seg.words] == [w["word"] for w in want["words"]]
        for got, ref in zip(seg.words, want["words"]):
            # transformers' times, clipped to the audio like the segments
            assert got.start == pytest.approx(min(ref["start"], result.duration), abs=0.02)
            assert got.end == pytest.approx(min(ref["end"], result.duration), abs=0.02)
            assert 0.0 < got.probability <= 1.0
            assert got.start <= got.end <= result.duration


def test_word_timestamps_leave_the_transcription_unchanged(asr):
    audio = (clips()["long"], SAMPLE_RATE)
    plain = asr.transcribe(audio, language="en", timestamps=True, max_new_tokens=24)
    timed = asr.transcribe(audio, language="en", timestamps=True, max_new_tokens=24, word_timestamps=True)
    assert timed.token_ids == plain.token_ids
    assert [s.text for s in timed.segments] == [s.text for s in plain.segments]
    assert all(not s.words for s in plain.segments)
    assert sum(len(s.words) for s in timed.segments) > 0
    # without timestamp tokens, a window is a segment and its words are timed all the same
    untimed = asr.transcribe(audio, language="en", max_new_tokens=24, word_timestamps=True)
    assert any(s.words for s in untimed.segments)
    assert "".join(w.word for w in untimed.segments[0].words) == untimed.segments[0].text


@pytest.mark.parametrize("name", sorted(REF["beam_cases"]))
def test_words_with_beam_search_match_transformers(asr, name):
    """num_beams: the words of the chosen beam, timed as transformers times them (its cross-attentions
    gathered along the beam's path; here the beam's tokens fed again)."""
    case = REF["beam_cases"][name]
    s = REF["settings"]
    kwargs = dict(language=s["language"], timestamps=True, max_new_tokens=s["max_new_tokens"])
    result = asr.transcribe((clips()[name], SAMPLE_RATE), num_beams=case["num_beams"], word_timestamps=True, **kwargs)
    plain = asr.transcribe((clips()[name], SAMPLE_RATE), num_beams=case["num_beams"], **kwargs)
    assert result.token_ids == plain.token_ids  # the alignment pass leaves the search alone
    assert [s.avg_logprob for s in result.segments] == [s.avg_logprob for s in plain.segments]
    assert [list(seg.token_ids) for seg in result.segments] == [w["token_ids"] for w in case["segments"]]
    specials = asr._parts.vocab.special_ids
    compared = 0
    for seg, want in zip(result.segments, case["segments"]):
        assert "".join(w.word for w in seg.words) == seg.text
        if any(t in specials for t in seg.token_ids):
            # a language token inside the text (the random model's): transformers makes it a word of its
            # own ("<|tk|>"), the library leaves it out of the words as it leaves it out of the text
            continue
        assert [w.word for w in seg.words] == [w["word"] for w in want["words"]]
        for got, ref in zip(seg.words, want["words"]):
            assert got.start == pytest.approx(min(ref["start"], result.duration), abs=0.02)
            assert got.end == pytest.approx(min(ref["end"], result.duration), abs=0.02)
            assert 0.0 < got.probability <= 1.0
        compared += len(seg.words)
    assert compared >= 2


def test_words_with_beam_search_vary_in_time():
    """The beam references hold times that differ from word to word (a test of the alignment, not of zeros)."""
    times = {w["start"] for c in REF["beam_cases"].values() for s in c["segments"] for w in s["words"]}
    assert len(times) >= 3


def test_rewritten_decoder_is_cached_and_the_original_untouched(tmp_path):
    before = DECODER.stat().st_mtime_ns
    first = attention_decoder_files([DECODER], layers=2, cache_dir=tmp_path)[DECODER]
    assert first != DECODER and first.is_file()
    stamp = first.stat().st_mtime_ns
    again = attention_decoder_files([DECODER], layers=2, cache_dir=tmp_path)[DECODER]
    assert again == first and again.stat().st_mtime_ns == stamp  # made once
    assert DECODER.stat().st_mtime_ns == before
    outputs = [o.name for o in onnx.load(str(first)).graph.output]
    assert cross_attention_outputs(outputs) == ["cross_attentions.0", "cross_attentions.1"]
    assert not cross_attention_outputs(o.name for o in onnx.load(str(DECODER)).graph.output)
    # a decoder that already outputs cross_attentions (the *_timestamped exports) is used as it is
    assert attention_decoder_files([first], layers=2, cache_dir=tmp_path / "other")[first] == first


def test_a_fused_decoder_is_refused_with_the_fix(tmp_path):
    from inference4py.errors import UnsupportedModelError

    model = onnx.load(str(DECODER))
    for node in model.graph.node:  # hide the Softmax nodes, as a fused attention operator would
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                for inner in attr.g.node:
                    if inner.op_type == "Softmax":
                        inner.op_type = "LogSoftmax"
    path = tmp_path / "decoder_model_merged.onnx"
    onnx.save(model, str(path))
    with pytest.raises(UnsupportedModelError, match="without word_timestamps"):
        attention_decoder_files([path], layers=2, cache_dir=tmp_path / "cache")


# --------------------------------------------------------------------------- the parts


def _dtw_transformers(matrix):
    """transformers 4.57 ``_dynamic_time_warping``, loop for loop."""
    n, m = matrix.shape
    cost = np.ones((n + 1, m + 1), dtype=np.float32) * np.inf
    trace = -np.ones((n + 1, m + 1), dtype=np.float32)
    cost[0, 0] = 0
    for j in range(1, m + 1):
        for i in range(1, n + 1):
            c0, c1, c2 = cost[i - 1, j - 1], cost[i - 1, j], cost[i, j - 1]
            if c0 < c1 and c0 < c2:
                c, t = c0, 0
            elif c1 < c0 and c1 < c2:
                c, t = c1, 1
            else:
                c, t = c2, 2
            cost[i, j] = matrix[i - 1, j - 1] + c
            trace[i, j] = t
    i, j = trace.shape[0] - 1, trace.shape[1] - 1
    trace[0, :] = 2
    trace[:, 0] = 1
    text, time = [], []
    while i > 0 or j > 0:
        text.append(i - 1)
        time.append(j - 1)
        if trace[i, j] == 0:
            i, j = i - 1, j - 1
        elif trace[i, j] == 1:
            i -= 1
        else:
            j -= 1
    return np.array(text[::-1]), np.array(time[::-1])


@pytest.mark.parametrize("shape", [(1, 1), (1, 9), (7, 3), (12, 40), (30, 25)])
def test_dtw_is_transformers(shape):
    rng = np.random.default_rng(shape[0] * 100 + shape[1])
    for matrix in (rng.standard_normal(shape), np.round(rng.standard_normal(shape)), np.zeros(shape)):  # ties too
        got = dynamic_time_warping(matrix)
        want = _dtw_transformers(matrix)
        assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])


def test_median_filter():
    x = np.array([[3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0, 6.0, 5.0, 3.0]])
    padded = np.pad(x, ((0, 0), (3, 3)), mode="reflect")
    want = np.array([[np.median(padded[0, k : k + 7]) for k in range(x.shape[1])]])
    assert np.array_equal(median_filter(x, 7), want)
    assert np.array_equal(median_filter(x[:, :3], 7), x[:, :3])  # too short: unchanged, as transformers
    with pytest.raises(ValueError):
        median_filter(x, 4)


def test_punctuation_joins_its_word():
    words = [" Hello", ",", " (", "world", ")", " \u201c", "yes", "!"]
    indices = [[i] for i in range(len(words))]
    merge_punctuations(words, indices)
    assert words == [" Hello,", " (world)", " \u201cyes!"]
    assert indices == [[0, 1], [2, 3, 4], [5, 6, 7]]


def test_split_words_on_spaces_and_characters(asr):
    tok = asr.tokenizer
    ids = tok.encode(" the quick, brown fox.", add_special_tokens=False)

    def decode(x):
        return tok.decode(x, skip_special_tokens=False)

    words, indices = split_words(ids, decode, language="en", is_special=lambda t: t >= 400)
    assert words == [" the", " quick,", " brown", " fox."]
    assert [i for idx in indices for i in idx] == list(range(len(ids)))
    chars, _ = split_words(ids, decode, language="ja", is_special=lambda t: t >= 400)
    assert "".join(chars) == " the quick, brown fox." and len(chars) > len(words)


def test_default_alignment_heads():
    assert default_alignment_heads(4, 2) == [(2, 0), (2, 1), (3, 0), (3, 1)]
    assert default_alignment_heads(1, 2) == [(0, 0), (0, 1)]
