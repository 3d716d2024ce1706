"""Whisper on real checkpoints (base, tiny.en) against transformers, in every layout the tools build.

The folders, the espeak-ng clips and transformers' references live in the real-checkpoint cache
(``$INFERENCE4PY_REAL_DIR``, default ``~/.cache/inference4py/real``), built by
``python tools/build_real.py --only whisper`` (or ``python -m tools.real.whisper``):

* ``whisper-base-optimum``, ``whisper-tiny.en-optimum``: optimum's export, run by
  :class:`inference4py.WhisperSpeechModel` (the native loop);
* ``whisper-base-genai-fp32``: onnxruntime-genai's model builder, run by
  :class:`inference4py_genai.WhisperSpeechModel`;
* ``references/whisper.json``: transformers' greedy ``generate()`` on the fp32 weights, with the
  top-1/top-2 margin of every step.

Each case transcribes one clip with the library's public API and requires transformers' ids
(a divergence is tolerated only at a step whose recorded margin is below ``near_tie``, 1e-3, and
the ids before it must be equal), transformers' text and segments when the ids are equal, and a
word error rate against the spoken text below the bound in ``WER_BOUNDS``.

When the cache is missing the tests fail and name the build command.
"""

from __future__ import annotations

import functools
import re
from typing import Any

import pytest

from tests.real.conftest import REAL, not_built, read_json

pytestmark = pytest.mark.real

#: folder in the cache -> (model, backend)
LAYOUTS: dict[str, tuple[str, str]] = {
    "whisper-base-optimum": ("whisper-base", "native"),
    "whisper-tiny.en-optimum": ("whisper-tiny.en", "native"),
    "whisper-base-genai-fp32": ("whisper-base", "genai"),
}

#: the reference cases per model (tools/real/whisper.py CASES): name -> clip
CASES: dict[str, dict[str, str]] = {
    "whisper-base": {
        "en-short": "en-short",
        "en-short-timestamps": "en-short",
        "en-short-detect": "en-short",
        "en-paragraph": "en-paragraph",
        "en-paragraph-timestamps": "en-paragraph",
        "de-short": "de-short",
        "de-short-detect-timestamps": "de-short",
        "de-short-translate": "de-short",
        "en-long-timestamps": "en-long",
        "en-long": "en-long",
    },
    "whisper-tiny.en": {
        "en-short": "en-short",
        "en-short-timestamps": "en-short",
        "en-paragraph": "en-paragraph",
        "en-paragraph-timestamps": "en-paragraph",
        "en-long-timestamps": "en-long",
        "en-long": "en-long",
    },
}

#: Upper bounds of the word error rate against the spoken text (lowercase, no punctuation), per
#: model and clip.  espeak-ng's robotic voice costs Whisper a few words ("brown fox" is heard as
#: "roundfire" by tiny.en); the bounds sit above transformers' own WER on the same weights
#: (recorded in the references as ``wer``) and catch a pipeline that hears noise.  Translations
#: are compared with the English text of the clip (``translation`` in clips.json), more loosely.
WER_BOUNDS: dict[str, dict[str, float]] = {
    "whisper-base": {"en-short": 0.25, "en-paragraph": 0.2, "en-long": 0.2, "de-short": 0.5, "translation": 0.6},
    "whisper-tiny.en": {"en-short": 0.45, "en-paragraph": 0.2, "en-long": 0.2},
}


def _missing(what: str) -> None:
    not_built(what, only="whisper")


@functools.cache
def references() -> dict[str, Any]:
    data = read_json(REAL / "references" / "whisper.json")
    if data is None:
        _missing("references/whisper.json")
    return data


@functools.cache
def manifest() -> dict[str, Any]:
    data = read_json(REAL / "whisper-manifest.json")
    if data is None:
        _missing("whisper-manifest.json")
    return data


def reference_case(model: str, name: str) -> dict[str, Any]:
    cases = {c["name"]: c for c in references()["models"].get(model, {}).get("cases", [])}
    if name not in cases:
        _missing(f"the reference case {model}/{name}")
    return cases[name]


_open: dict[str, Any] = {}


def speech_model(layout: str):
    """The layout's WhisperSpeechModel, built once per session (closed by the fixture below)."""
    if layout in _open:
        return _open[layout]
    folder = REAL / layout
    if not folder.is_dir():
        recorded = manifest().get("layouts", {}).get(layout, {})
        if recorded.get("status") == "failed":
            _missing(f"{layout} (its build failed: {recorded.get('reason', '?')[:1500]})")
        _missing(layout)
    _model, backend = LAYOUTS[layout]
    if backend == "genai":
        from inference4py_genai import WhisperSpeechModel
    else:
        from inference4py import WhisperSpeechModel
    _open[layout] = WhisperSpeechModel.builder().model_path(folder).build()
    return _open[layout]


@pytest.fixture(scope="module", autouse=True)
def _close_models():
    yield
    for model in _open.values():
        model.close()
    _open.clear()


_results: dict[tuple[str, str], Any] = {}


def transcription(layout: str, name: str):
    """WhisperSpeechModel.transcribe of the case's clip with the case's settings (cached per layout and case)."""
    key = (layout, name)
    if key not in _results:
        model_name, _ = LAYOUTS[layout]
        case = reference_case(model_name, name)
        clip = REAL / "audio" / f"{case['clip']}.wav"
        if not clip.is_file():
            _missing(f"audio/{clip.name}")
        settings = case["settings"]
        _results[key] = speech_model(layout).transcribe(
            clip,
            language=settings.get("language"),
            task=settings.get("task"),
            timestamps=bool(settings.get("timestamps")),
        )
    return _results[key]


def _params():
    for layout, (model, _backend) in LAYOUTS.items():
        kind = layout.removeprefix(model + "-")
        for name in CASES[model]:
            yield pytest.param(layout, name, id=f"{model}/{kind}/{name}")


def _step_margins(case: dict[str, Any]) -> list[list[float]]:
    """Per position of ``token_ids`` (and one past the end): the recorded margins (top-1/top-2 of the final
    scores, and the timestamp rule's) of the steps whose choice decides the id there.

    A position inside a window is that window's step; the first position of the next window is also decided
    by the previous window's steps after its kept ids (its <|endoftext|> or the dropped unfinished segment,
    which sets where the next window starts); one past the end is the last window's final steps.
    """
    out: list[list[float]] = []
    carry: list[float] = []
    for window in case["windows"]:
        steps = [
            [m for m in pair if m is not None] for pair in zip(window["margins"], window["timestamp_rule_margins"])
        ]
        kept = window["kept"]
        for i in range(kept):
            out.append(steps[i] + (carry if i == 0 else []))
        tail = [m for step in steps[kept:] for m in step]
        carry = tail if kept else carry + tail
    out.append(carry)
    return out


def _first_difference(got: list[int], want: list[int]) -> int | None:
    for i, (a, b) in enumerate(zip(got, want)):
        if a != b:
            return i
    return None if len(got) == len(want) else min(len(got), len(want))


def id_divergence(got: list[int], language: str | None, case: dict[str, Any], near_tie: float) -> tuple[bool, str]:
    """Compare the library's ids (and detected language) with the reference case.

    Returns (tolerated, message): ``message`` is empty when the ids are equal; otherwise it names the
    first differing step and ``tolerated`` says whether that step is a recorded near tie (top-2 or
    timestamp-rule margin below ``near_tie``, or a language detection margin below it).
    """
    want = case["token_ids"]
    detection = case.get("detection")
    if detection and language != case["language"]:
        return detection["margin"] < near_tie, (
            f"detected {language!r}, transformers {case['language']!r} (language-logit margin {detection['margin']})"
        )
    at = _first_difference(got, want)
    if at is None:
        return True, ""
    margins = _step_margins(case)[at]
    return any(m < near_tie for m in margins), (
        f"the ids differ from transformers' at step {at} "
        f"(library {got[at] if at < len(got) else 'end'}, transformers {want[at] if at < len(want) else 'end'}; "
        f"recorded margins there {margins})\nlibrary:      {got}\ntransformers: {want}"
    )


@pytest.mark.parametrize("layout,name", list(_params()))
def test_ids_match_transformers(layout, name):
    model_name, _ = LAYOUTS[layout]
    case = reference_case(model_name, name)
    result = transcription(layout, name)
    tolerated, message = id_divergence(list(result.token_ids), result.language, case, references()["near_tie"])
    assert tolerated, f"{layout} / {name}: {message}"
    if message:
        return  # a recorded near tie: the ids before it are equal, after it they may differ
    assert result.text == case["text"]
    if case["language"] is not None:
        assert result.language == case["language"]
    assert [list(s.token_ids) for s in result.segments] == [s["token_ids"] for s in case["segments"]]
    for seg, ref in zip(result.segments, case["segments"]):  # transformers' times may pass the audio's end
        assert seg.start == pytest.approx(min(ref["start"], result.duration), abs=1e-6)
        assert seg.end == pytest.approx(min(ref["end"], result.duration), abs=1e-6)
        assert seg.text == ref["text"]


def test_divergence_is_tolerated_only_at_a_near_tie():
    # two windows: 3 ids kept of [5, 6, 7, <ts>, 9] (an unfinished segment dropped), then [8, <eos>]
    def case(tail=0.7, rule=0.0001):
        return {
            "token_ids": [5, 6, 7, 8],
            "language": "en",
            "windows": [
                {"kept": 3, "margins": [0.5, 0.0004, 0.5, 0.5, tail], "timestamp_rule_margins": [None] * 5},
                {"kept": 1, "margins": [0.5, 0.3], "timestamp_rule_margins": [rule, None]},
            ],
        }

    assert id_divergence([5, 6, 7, 8], "en", case(), 1e-3) == (True, "")
    assert id_divergence([5, 1, 2], "en", case(), 1e-3)[0]  # step 1: margin 0.0004
    assert not id_divergence([5, 6, 1], "en", case(), 1e-3)[0]  # step 2: margin 0.5
    assert not id_divergence([5, 6], "en", case(), 1e-3)[0]  # stopped where transformers had a 0.5 margin
    assert id_divergence([5, 6, 7, 1], "en", case(), 1e-3)[0]  # the next window's first step: rule margin 1e-4
    assert not id_divergence([5, 6, 7, 1], "en", case(rule=0.2), 1e-3)[0]
    assert id_divergence([5, 6, 7, 1], "en", case(tail=0.0002, rule=0.2), 1e-3)[0]  # the dropped tail decided
    assert not id_divergence([5, 6, 7, 8, 1], "en", case(), 1e-3)[0]  # after the end: the final step's 0.3
    assert id_divergence([1], "de", {**case(), "detection": {"margin": 0.0005}}, 1e-3)[0]
    assert not id_divergence([1], "de", {**case(), "detection": {"margin": 2.0}}, 1e-3)[0]


@pytest.mark.parametrize("layout,name", list(_params()))
def test_text_is_close_to_the_spoken_text(layout, name):
    model_name, _ = LAYOUTS[layout]
    case = reference_case(model_name, name)
    clip = references()["clips"][case["clip"]]
    result = transcription(layout, name)
    if case["settings"].get("task") == "translate":
        spoken, bound = clip["translation"], WER_BOUNDS[model_name]["translation"]
    else:
        spoken, bound = clip["text"], WER_BOUNDS[model_name][case["clip"]]
    wer = word_error_rate(spoken, result.text)
    assert wer <= bound, f"{layout} / {name}: WER {wer:.3f} > {bound}\nspoken: {spoken}\nheard:  {result.text}"
    if not case["settings"].get("language") and model_name == "whisper-base":
        assert result.language == clip["language"]  # detected


# --------------------------------------------------------------------------- word error rate


def normalize_words(text: str) -> list[str]:
    """Lowercase words without punctuation (the tools' twin: tools/real/whisper.py normalize_words)."""
    text = text.lower().replace("\u2019", "'")
    return re.findall(r"[^\W_]+(?:'[^\W_]+)*", text)


def word_error_rate(reference: str, hypothesis: str) -> float:
    ref, hyp = normalize_words(reference), normalize_words(hypothesis)
    prev = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        cur = [i] + [0] * len(hyp)
        for j, h in enumerate(hyp, 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (r != h))
        prev = cur
    return prev[-1] / max(len(ref), 1)


def test_word_error_rate():
    assert word_error_rate("The quick brown fox.", " the quick brown fox") == 0.0
    assert word_error_rate("a b c d", "a x c") == 0.5  # one substitution, one deletion
    assert word_error_rate("Grüß Gott, Sie!", "grüß gott sie") == 0.0


# --------------------------------------------------------------------------- word timestamps, VAD, long-form policy


@functools.cache
def word_references() -> dict[str, Any]:
    data = read_json(REAL / "references" / "whisper_words.json")
    if data is None:
        not_built("references/whisper_words.json (python -m tools.real.whisper_words)", only="whisper")
    return data


def _word_params():
    for model in ("whisper-base", "whisper-tiny.en"):
        for clip in ("en-short", "en-paragraph", "en-long"):
            if model == "whisper-tiny.en" and clip == "en-long":
                continue
            yield pytest.param(model, clip, id=f"{model}/{clip}")


@pytest.mark.parametrize("model,clip", list(_word_params()))
def test_word_times_line_up_with_transformers(model, clip):
    """Real speech: the words and their times (the alignment heads' cross-attention, DTW) are transformers'."""
    entry = word_references()["models"][model]
    case = entry["cases"][clip]
    result = speech_model(entry["folder"]).transcribe(
        REAL / "audio" / f"{clip}.wav", language=case["language"], timestamps=True, word_timestamps=True
    )
    assert [list(s.token_ids) for s in result.segments] == [s["token_ids"] for s in case["segments"]]
    got = [(w.word, w.start, w.end) for s in result.segments for w in s.words]
    want = [(w["word"], w["start"], w["end"]) for s in case["segments"] for w in s["words"]]
    assert [g[0] for g in got] == [w[0] for w in want]
    for (word, start, end), (_, ref_start, ref_end) in zip(got, want):
        assert start == pytest.approx(min(ref_start, result.duration), abs=0.02 + 1e-6), word
        assert end == pytest.approx(min(ref_end, result.duration), abs=0.02 + 1e-6), word
    spoken = references()["clips"][clip]["text"]
    assert word_error_rate(spoken, "".join(g[0] for g in got)) <= WER_BOUNDS[model][clip]


@pytest.mark.parametrize("clip", ["en-short", "en-paragraph"])
def test_word_times_with_beam_search_line_up_with_transformers(clip):
    """num_beams on real speech: the chosen beam's ids and words, timed as transformers times them
    (references/whisper_beams.json: its cross-attentions gathered along the beam's path)."""
    data = read_json(REAL / "references" / "whisper_beams.json")
    if data is None:
        not_built("references/whisper_beams.json (python -m tools.real.whisper_words --beams)", only="whisper")
    entry = data["models"]["whisper-base"]
    case = entry["cases"][clip]
    result = speech_model(entry["folder"]).transcribe(
        REAL / "audio" / f"{clip}.wav",
        language=case["language"],
        timestamps=True,
        word_timestamps=True,
        num_beams=case["num_beams"],
    )
    assert [list(s.token_ids) for s in result.segments] == [s["token_ids"] for s in case["segments"]]
    got = [(w.word, w.start, w.end) for s in result.segments for w in s.words]
    want = [(w["word"], w["start"], w["end"]) for s in case["segments"] for w in s["words"]]
    assert [g[0] for g in got] == [w[0] for w in want]
    for (word, start, end), (_, ref_start, ref_end) in zip(got, want):
        assert start == pytest.approx(min(ref_start, result.duration), abs=0.02 + 1e-6), word
        assert end == pytest.approx(min(ref_end, result.duration), abs=0.02 + 1e-6), word
    spoken = references()["clips"][clip]["text"]
    assert word_error_rate(spoken, "".join(g[0] for g in got)) <= WER_BOUNDS["whisper-base"][clip]


def _vad_recording():
    """The VAD recording (tests/fixtures/vad), its true onsets and VAD regions, and transformers' reference."""
    import json
    from pathlib import Path

    from inference4py.audio import SAMPLE_RATE, load_audio
    from inference4py.speech.vad import SileroVad
    from tests.speech.test_vad import compose, speech_extent

    vad_dir = Path(__file__).resolve().parents[1] / "fixtures" / "vad"
    reference = json.loads((vad_dir / "reference.json").read_text(encoding="utf-8"))
    ref = read_json(REAL / "references" / "whisper_vad.json")
    if ref is None:
        not_built("references/whisper_vad.json (python -m tools.real.whisper_words --vad)", only="whisper")
    a, b = load_audio(vad_dir / "speech-a.flac"), load_audio(vad_dir / "speech-b.flac")
    audio, placed = compose(a, b, reference["recipe"])
    assert [list(p) for p in placed] == ref["clip_positions"]
    a_start = (placed[0][0] + speech_extent(a)[0]) / SAMPLE_RATE  # 1.016 s: the true onsets
    a_end = (placed[0][0] + speech_extent(a)[1]) / SAMPLE_RATE
    b_start = (placed[1][0] + speech_extent(b)[0]) / SAMPLE_RATE  # 26.139 s
    vad = SileroVad(vad_dir / "silero_vad_v6.onnx")
    speech = vad.speech_map(audio)
    assert [list(r) for r in speech.regions] == ref["regions"]
    spoken = " ".join(reference["clips"][k] for k in ("speech-a", "speech-b"))
    return audio, (a_start, a_end, b_start), vad, speech, ref, spoken


def _transformers_words(ref, time_map):
    """transformers' words on the chunk, mapped back by the region each word's middle lies in."""
    want = []
    for s in ref["segments"]:
        for w in s["words"]:
            region = time_map.region_at((w["start"] + w["end"]) / 2)
            want.append(
                (
                    w["word"],
                    time_map.to_original_in(w["start"], region),
                    time_map.to_original_in(w["end"], region),
                    region,
                )
            )
    return want


def test_vad_leaves_the_silence_out_and_places_the_later_speech():
    """Speech, 20 s of noise, speech (tests/fixtures/vad): with VAD no word lies in or reaches into the gap,
    the first word of each sentence starts where Silero found its speech, and the other words are
    transformers' words on the same speech chunk, mapped back.

    The true onset of the second sentence is where its clip's first loud sample was put (26.139 s).
    The VAD region, the chunk offsets and the mapping back are exact (that onset is 5.963 s into the
    chunk, and every time maps back by 20.176 s); DTW over the alignment heads, transformers' method
    and ours, times "After" at 6.26 s of the chunk, 0.30 s after the onset (the rows of the timestamp
    tokens before it take the pause; openai-whisper's alignment, on the text tokens alone, would give
    5.84 s), and "Voice" at the chunk start, 0.39 s before its onset (1.016 s), in the padding.
    Silero's onsets of the two regions (before the 400 ms padding) are 1.024 s and 26.144 s, so with
    ``VadOptions.word_onsets`` (the default) "Voice" starts 0.008 s and "After" 0.005 s after the
    truth (``after_onset``, within 0.1 s); every other word is transformers' within 0.02 s.
    """
    from inference4py.audio import SAMPLE_RATE

    audio, (a_start, a_end, b_start), vad, speech, ref, spoken = _vad_recording()
    regions = speech.regions
    result = speech_model("whisper-base-optimum").transcribe(
        (audio, SAMPLE_RATE), language="en", timestamps=True, word_timestamps=True, vad=vad
    )
    assert word_error_rate(spoken, result.text) <= 0.15
    assert [list(s.token_ids) for s in result.segments] == [s["token_ids"] for s in ref["segments"]]

    want = _transformers_words(ref, speech)
    words = [w for s in result.segments for w in s.words]
    assert [w.word for w in words] == [w[0] for w in want]
    firsts = {}  # region -> index of its first word
    for i, (_, _, _, region) in enumerate(want):
        firsts.setdefault(region, i)
    assert sorted(firsts) == [0, 1]
    for i, (w, (_, start, end, region)) in enumerate(zip(words, want)):
        if firsts[region] == i:  # the first word of a region: at Silero's onset of it
            assert w.start == pytest.approx(speech.onset_of(region), abs=1e-3), w.word
        else:
            assert w.start == pytest.approx(start, abs=0.02 + 1e-6), w.word
        assert w.end == pytest.approx(end, abs=0.02 + 1e-6), w.word

    # nothing in the silent part: every word starts and ends in the speech around it
    first, second = [w for w in words if w.start < a_end + 0.5], [w for w in words if w.start > b_start - 0.5]
    assert len(first) + len(second) == len(words)
    assert all(w.end <= regions[0][1] / SAMPLE_RATE for w in first)  # "speech." does not reach into the gap
    assert [w.word.strip(" ,.") for w in second[:3]] == ["After", "a", "long"]
    assert abs(first[0].start - a_start) <= 0.1, first[0].start - a_start  # "Voice": 0.008 s late (DTW: 0.39 s early)
    after_onset = second[0].start - b_start
    assert abs(after_onset) <= 0.1, after_onset  # 0.005 s late (transformers' DTW: 0.297 s late)
    assert second[1].start == pytest.approx(b_start + 0.5, abs=0.25)  # "a", about half a second in
    # the segment of the second sentence starts with its first word, not at its timestamp token
    # (<|5.00|>, which lies in the first region of the chunk: 5.624 s of the recording)
    assert result.segments[-1].start == second[0].start
    assert all(s.end <= regions[0][1] / SAMPLE_RATE for s in result.segments[:-1])
    assert result.duration == pytest.approx(audio.size / SAMPLE_RATE)


def test_vad_without_word_onsets_keeps_transformers_times():
    """``VadOptions(word_onsets=False)``: every word, the first of each sentence too, is transformers'
    (DTW) within 0.02 s, and "After" starts 0.30 s after the true onset: the setting matters."""
    from inference4py.audio import SAMPLE_RATE
    from inference4py.speech.vad import VadOptions

    audio, (_, _, b_start), vad, speech, ref, _ = _vad_recording()
    result = speech_model("whisper-base-optimum").transcribe(
        (audio, SAMPLE_RATE),
        language="en",
        timestamps=True,
        word_timestamps=True,
        vad=vad,
        vad_options=VadOptions(word_onsets=False),
    )
    assert [list(s.token_ids) for s in result.segments] == [s["token_ids"] for s in ref["segments"]]
    want = _transformers_words(ref, speech)
    words = [w for s in result.segments for w in s.words]
    assert [w.word for w in words] == [w[0] for w in want]
    for w, (_, start, end, _) in zip(words, want):
        assert w.start == pytest.approx(start, abs=0.02 + 1e-6), w.word
        assert w.end == pytest.approx(end, abs=0.02 + 1e-6), w.word
    after = next(w for w in words if w.word.strip() == "After")
    assert 0.25 <= after.start - b_start <= 0.35, after.start - b_start  # 0.297 s late
    assert result.segments[-1].start == after.start


def test_longform_policy_on_real_speech():
    """The long clip with openai-whisper's settings: fallback never needed on clean speech (greedy, confident),
    no window is silence, the previous text conditions the next window, and the text stays right."""
    clip = REAL / "audio" / "en-long.wav"
    asr = speech_model("whisper-base-optimum")
    plain = asr.transcribe(clip, language="en", timestamps=True)
    result = asr.transcribe(
        clip,
        language="en",
        timestamps=True,
        temperature=(0.0, 0.2, 0.4, 0.6, 0.8, 1.0),
        condition_on_previous_text=True,
        initial_prompt="A story about a village garden.",
    )
    assert all(s.temperature == 0.0 for s in result.segments)
    assert all(s.avg_logprob is not None and s.avg_logprob > -1.0 for s in result.segments)
    assert all(s.no_speech_prob is not None and s.no_speech_prob < 0.6 for s in result.segments)
    assert all(0.0 < s.compression_ratio < 2.4 for s in result.segments if s.text.strip())
    spoken = references()["clips"]["en-long"]["text"]
    assert word_error_rate(spoken, result.text) <= WER_BOUNDS["whisper-base"]["en-long"]
    assert word_error_rate(spoken, plain.text) <= WER_BOUNDS["whisper-base"]["en-long"]


def test_word_times_with_the_two_decoder_files(tmp_path):
    """optimum's other layout (decoder_model.onnx + decoder_with_past_model.onnx): both graphs are rewritten."""
    import os

    from inference4py import WhisperSpeechModel

    source = REAL / "whisper-base-optimum"
    if not source.is_dir():
        _missing("whisper-base-optimum")
    folder = tmp_path / "whisper-base-two-decoders"
    folder.mkdir()
    for path in source.iterdir():
        if path.is_file() and path.name != "decoder_model_merged.onnx":
            os.link(path, folder / path.name)  # the same files, without the merged decoder
    case = word_references()["models"]["whisper-base"]["cases"]["en-short"]
    with WhisperSpeechModel.builder().model_path(folder).build() as asr:
        assert asr._parts.backend.seq2seq.first is not asr._parts.backend.seq2seq.rest  # two graphs
        result = asr.transcribe(REAL / "audio" / "en-short.wav", language="en", timestamps=True, word_timestamps=True)
    got = [(w.word, w.start, w.end) for s in result.segments for w in s.words]
    want = [(w["word"], w["start"], w["end"]) for s in case["segments"] for w in s["words"]]
    assert [g[0] for g in got] == [w[0] for w in want]
    for (word, start, end), (_, ref_start, ref_end) in zip(got, want):
        assert start == pytest.approx(ref_start, abs=0.02 + 1e-6), word
        assert end == pytest.approx(min(ref_end, result.duration), abs=0.02 + 1e-6), word
