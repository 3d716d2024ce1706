"""Long-form decoding policy: temperature fallback, silent windows, prompts and previous-text context.

The policy tests drive WhisperSpeechModel's window loop with a scripted step model (chosen logits
per decoding attempt); the end-to-end tests run the tiny fixture and compare greedy long-form
against transformers' ``generate(condition_on_prev_tokens=..., no_speech_threshold=..., prompt_ids=...)``
(references/whisper_longform.json, made by tools/fixtures/whisper_longform.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np
import pytest

from inference4py import WhisperSpeechModel
from inference4py.audio import SAMPLE_RATE
from inference4py.errors import ConfigurationError
from inference4py.speech.decoding import (
    FALLBACK_TEMPERATURES,
    LongformOptions,
    WindowResult,
    best_candidate,
    compression_ratio,
    is_silence,
    needs_fallback,
    previous_context,
)
from inference4py.speech.runtime import WhisperRuntime
from tests.conftest import MODELS, load_reference
from tests.speech.test_whisper import clips

REF = load_reference("whisper_longform")
CASES = {c["name"]: c for c in REF["cases"]}
VOCAB = 2008
EOT, SOT, PREV, NO_SPEECH = 400, 401, 504, 505


# --------------------------------------------------------------------------- a scripted step model


@dataclass
class Attempt:
    """One decoding attempt: the <|nospeech|> probability at <|startoftranscript|>, then the tokens.

    ``margin`` is each chosen token's logit over the others' 0: 30 makes it certain (log-probability
    about 0, sampling always picks it), 2 leaves it likely but unsure (log-probability about -5.4).
    """

    no_speech: float
    tokens: list[int]
    margin: float = 30.0
    prompts: list[list[int]] = field(default_factory=list)


class ScriptedState:
    """A StepModel giving the attempt's logits: at <|startoftranscript|>, then one row per chosen token."""

    def __init__(self, attempt: Attempt) -> None:
        self.attempt = attempt
        self.rows = [self._no_speech_row()] + [self._row(t) for t in [*attempt.tokens, EOT]]
        self.seen: list[int] = []

    def _no_speech_row(self) -> np.ndarray:
        row = np.zeros((1, VOCAB), np.float32)
        p = self.attempt.no_speech
        row[0, NO_SPEECH] = math.log(p * (VOCAB - 1) / (1 - p))
        return row

    def _row(self, token: int) -> np.ndarray:
        row = np.zeros((1, VOCAB), np.float32)
        row[0, token] = self.attempt.margin
        return row

    def prefill(self, input_ids, attention_mask=None):
        ids = np.asarray(input_ids).reshape(-1).tolist()
        self.seen.extend(ids)
        if ids[-1] == SOT:  # the no-speech probe's run: up to <|startoftranscript|>
            return self.rows.pop(0)
        self.attempt.prompts.append(list(self.seen))
        return self.rows.pop(0)

    def step(self, tokens):
        return self.rows.pop(0)


class ScriptedRuntime(WhisperRuntime):
    """The native runtime with every decoding attempt scripted (nothing is encoded)."""

    script: list[Attempt]

    def encode(self, window):
        return None

    def new_state(self, context):
        return ScriptedState(self.script.pop(0))


class ScriptedWhisper(WhisperSpeechModel):
    """The fixture's vocabulary and processors, with every decoding attempt scripted."""

    def _load(self, folder, builder):
        parts = super()._load(folder, builder)
        rt = parts.backend
        scripted = ScriptedRuntime(rt.seq2seq, rt.vocab, folder=rt.folder, session_options=rt.session_options)
        return replace(parts, backend=scripted)

    @property
    def script(self) -> list[Attempt]:
        return self._parts.backend.script

    @script.setter
    def script(self, attempts: list[Attempt]) -> None:
        self._parts.backend.script = attempts


@pytest.fixture(scope="module")
def scripted():
    with ScriptedWhisper.builder().model_path(MODELS / "whisper").build() as model:
        yield model


def _run(model, attempts, seconds=5.0, **kwargs):
    # one scripted attempt per temperature; the best_of tests script the candidates of a sampled one
    kwargs.setdefault("best_of", 1)
    model.script = list(attempts)
    pieces: list[str] = []
    audio = np.zeros(int(seconds * SAMPLE_RATE), np.float32)
    result = model.transcribe((audio, SAMPLE_RATE), language="en", on_token=pieces.append, **kwargs)
    assert not model.script, "every scripted attempt is used"
    assert "".join(pieces) == result.text
    return result


TEXT_A = [300, 301, 302]  # " nght o st" in the fixture's vocabulary
TEXT_B = [303, 304]
LOOP = [303] * 40  # a loop of one word: compresses far better than 2.4


def test_fallback_on_low_logprob(scripted):
    result = _run(scripted, [Attempt(0.0001, TEXT_A, margin=2.0), Attempt(0.0001, TEXT_B)], temperature=(0.0, 0.2))
    (seg,) = result.segments
    assert seg.temperature == 0.2
    assert seg.avg_logprob > -1.0
    assert list(result.token_ids) == TEXT_B  # the first attempt's text is gone
    assert result.text == scripted.tokenizer.decode(TEXT_B)


def test_fallback_on_compression_ratio(scripted):
    result = _run(scripted, [Attempt(0.0001, LOOP), Attempt(0.0001, TEXT_A)], temperature=(0.0, 0.2))
    assert result.segments[0].temperature == 0.2
    assert list(result.token_ids) == TEXT_A
    # the same loop passes when the threshold allows it
    again = _run(scripted, [Attempt(0.0001, LOOP)], temperature=(0.0, 0.2), compression_ratio_threshold=100.0)
    assert list(again.token_ids) == LOOP
    assert again.segments[0].compression_ratio > 2.4
    assert again.segments[0].temperature == 0.0


def test_every_temperature_failing_keeps_the_last(scripted):
    attempts = [Attempt(0.0001, TEXT_A, margin=2.0), Attempt(0.0001, LOOP)]  # unsure, then a loop
    result = _run(scripted, attempts, temperature=(0.0, 0.6))
    assert result.segments[0].temperature == 0.6
    assert list(result.token_ids) == LOOP


def test_no_fallback_with_one_temperature(scripted):
    result = _run(scripted, [Attempt(0.0001, TEXT_A, margin=2.0)])
    assert result.segments[0].avg_logprob < -1.0
    assert result.segments[0].temperature == 0.0


def test_silent_window_is_skipped(scripted):
    # two windows: the first is silence (likely <|nospeech|>, unsure text), the second is kept
    result = _run(
        scripted,
        [Attempt(0.9, TEXT_A, margin=2.0), Attempt(0.0001, TEXT_B)],
        seconds=40.0,
    )
    (seg,) = result.segments
    assert list(result.token_ids) == TEXT_B
    assert seg.start == pytest.approx(30.0)
    assert seg.no_speech_prob == pytest.approx(0.0001, rel=1e-3)


def test_no_speech_with_confident_text_is_kept(scripted):
    result = _run(scripted, [Attempt(0.9, TEXT_A, margin=30.0)])
    assert list(result.token_ids) == TEXT_A
    assert result.segments[0].no_speech_prob == pytest.approx(0.9, rel=1e-4)
    # with the threshold off, even unsure text on a likely <|nospeech|> is kept
    kept = _run(scripted, [Attempt(0.9, TEXT_A, margin=2.0)], no_speech_threshold=None)
    assert list(kept.token_ids) == TEXT_A


def test_silence_is_not_retried(scripted):
    # a silent window fails the log-probability threshold, but silence is skipped, not decoded again
    result = _run(scripted, [Attempt(0.9, TEXT_A, margin=2.0)], temperature=FALLBACK_TEMPERATURES)
    assert result.segments == ()
    assert result.text == ""


def test_condition_on_previous_text(scripted):
    first, second = Attempt(0.0001, TEXT_A), Attempt(0.0001, TEXT_B)
    result = _run(scripted, [first, second], seconds=40.0, condition_on_previous_text=True)
    assert list(result.token_ids) == TEXT_A + TEXT_B
    assert first.prompts[0][0] == SOT
    assert second.prompts[0][: 1 + len(TEXT_A)] == [PREV, *TEXT_A]
    assert second.prompts[0][1 + len(TEXT_A)] == SOT
    # off: no context
    first, second = Attempt(0.0001, TEXT_A), Attempt(0.0001, TEXT_B)
    _run(scripted, [first, second], seconds=40.0)
    assert second.prompts[0][0] == SOT


def test_context_resets_after_a_hot_window(scripted):
    # window 1 falls back to 0.6 (> 0.5): window 2 starts without context, as openai-whisper does
    attempts = [Attempt(0.0001, TEXT_A, margin=2.0), Attempt(0.0001, TEXT_B), Attempt(0.0001, TEXT_A)]
    _run(scripted, attempts, seconds=40.0, condition_on_previous_text=True, temperature=(0.0, 0.6))
    assert attempts[2].prompts[0][0] == SOT


def test_initial_prompt(scripted):
    prompt_ids = scripted.tokenizer.encode(" Glossary: ONNX", add_special_tokens=False)
    first, second = Attempt(0.0001, TEXT_A), Attempt(0.0001, TEXT_B)
    result = _run(scripted, [first, second], seconds=40.0, initial_prompt="  Glossary: ONNX ")
    assert first.prompts[0] == [PREV, *prompt_ids, SOT, 402, 502, 506]
    assert second.prompts[0][0] == SOT  # the prompt is for the first window only
    assert list(result.token_ids) == TEXT_A + TEXT_B  # the prompt is not part of the output
    # prompt_ids (with or without <|startofprev|>) is the same prompt; with context it stays in front
    first, second = Attempt(0.0001, TEXT_A), Attempt(0.0001, TEXT_B)
    _run(scripted, [first, second], seconds=40.0, prompt_ids=[PREV, *prompt_ids], condition_on_previous_text=True)
    assert first.prompts[0][: 1 + len(prompt_ids)] == [PREV, *prompt_ids]
    assert second.prompts[0][: 1 + len(prompt_ids) + len(TEXT_A)] == [PREV, *prompt_ids, *TEXT_A]


def test_streaming_waits_for_a_judged_window(scripted):
    pieces: list[str] = []
    scripted.script = [Attempt(0.0001, TEXT_A, margin=2.0), Attempt(0.0001, TEXT_B)]
    audio = np.zeros(5 * SAMPLE_RATE, np.float32)
    result = scripted.transcribe(
        (audio, SAMPLE_RATE), language="en", temperature=(0.0, 0.2), best_of=1, on_token=pieces.append
    )
    assert "".join(pieces) == result.text == scripted.tokenizer.decode(TEXT_B)


def test_best_of_keeps_the_most_likely_candidate(scripted):
    # greedy is unsure (margin 2): at 0.2 five candidates are sampled; the surest (margin 30) is kept
    # (margins of 4 and more: at 0.2 the scripted token is sampled with certainty)
    candidates = [Attempt(0.0001, TEXT_A, margin=m) for m in (4.0, 5.0)]
    candidates += [Attempt(0.0001, TEXT_B, margin=30.0)] + [Attempt(0.0001, TEXT_A, margin=m) for m in (6.0, 4.0)]
    result = _run(scripted, [Attempt(0.0001, TEXT_A, margin=2.0), *candidates], temperature=(0.0, 0.2), best_of=5)
    (seg,) = result.segments
    assert list(result.token_ids) == TEXT_B and seg.temperature == 0.2
    assert seg.avg_logprob > -0.01  # the kept candidate's numbers
    # by default (openai-whisper's best_of=5) as well
    scripted.script = [Attempt(0.0001, TEXT_A, margin=2.0), *candidates]
    audio = (np.zeros(5 * SAMPLE_RATE, np.float32), SAMPLE_RATE)
    assert scripted.transcribe(audio, language="en", temperature=(0.0, 0.2)).token_ids == result.token_ids
    assert not scripted.script  # five candidates used


def test_best_of_ranks_by_the_average_not_the_sum(scripted):
    # TEXT_A: 3 tokens at margin 5 (about -2.7 each); TEXT_B: 2 tokens at margin 4 (about -3.6 each).
    # The sum prefers TEXT_B (-7.3 > -8.1), openai-whisper's ranking (sum / length) TEXT_A.
    candidates = [Attempt(0.0001, TEXT_B, margin=4.0), Attempt(0.0001, TEXT_A, margin=5.0)]
    result = _run(scripted, candidates, temperature=0.2, best_of=2)
    assert list(result.token_ids) == TEXT_A
    # the kept candidate is then judged: all candidates failing the threshold move on to the next temperature
    unsure = [Attempt(0.0001, TEXT_B, margin=2.0), Attempt(0.0001, TEXT_A, margin=2.0)]
    result = _run(scripted, [*unsure, Attempt(0.0001, TEXT_B)], temperature=(0.05, 0.0), best_of=2)
    assert list(result.token_ids) == TEXT_B and result.segments[0].temperature == 0.0


def test_best_of_does_not_apply_to_greedy_attempts(scripted):
    result = _run(scripted, [Attempt(0.0001, TEXT_A, margin=2.0)], temperature=0.0, best_of=5)
    assert list(result.token_ids) == TEXT_A  # one attempt used


def test_best_of_candidates_stream_nothing_until_judged(scripted):
    pieces: list[str] = []
    scripted.script = [Attempt(0.0001, TEXT_A, margin=6.0), Attempt(0.0001, TEXT_B, margin=30.0)]
    audio = np.zeros(5 * SAMPLE_RATE, np.float32)
    result = scripted.transcribe(
        (audio, SAMPLE_RATE), language="en", temperature=0.3, best_of=2, on_token=pieces.append
    )
    assert "".join(pieces) == result.text == scripted.tokenizer.decode(TEXT_B)


def test_candidates_have_generators_of_their_own():
    from inference4py.speech.decoding import candidate_generators

    rng = np.random.default_rng(3)
    assert candidate_generators(rng, 1) == [rng]
    draws = [g.random() for g in candidate_generators(np.random.default_rng(3), 4)]
    assert len(set(draws)) == 4  # four different streams ...
    assert draws == [g.random() for g in candidate_generators(np.random.default_rng(3), 4)]  # ... from the seed


def test_best_candidate_is_openais_ranking():
    def result(n, total):
        return WindowResult(tuple(range(n)), 0.2, None, None, 1.0, sum_logprob=total)

    assert best_candidate([result(3, -3.0), result(2, -2.5)]) == 0  # -1.0 per token beats -1.25
    assert best_candidate([result(3, -9.0), result(1, -2.0)]) == 1
    assert best_candidate([result(2, -2.0), result(4, -4.0)]) == 0  # a tie: the first
    assert best_candidate([result(0, -0.5), result(2, -0.4)]) == 1  # no tokens: the sum alone
    assert best_candidate([result(2, None), result(2, -100.0)]) == 1
    with pytest.raises(ValueError):
        best_candidate([])


def test_options_are_checked(scripted):
    audio = (np.zeros(SAMPLE_RATE, np.float32), SAMPLE_RATE)
    with pytest.raises(ConfigurationError, match="not both"):
        scripted.transcribe(audio, initial_prompt="a", prompt_ids=[300])
    with pytest.raises(ConfigurationError, match="text tokens"):
        scripted.transcribe(audio, prompt_ids=[300, SOT])
    with pytest.raises(ConfigurationError, match="temperature"):
        scripted.transcribe(audio, temperature=())
    with pytest.raises(ConfigurationError, match="temperature"):
        scripted.transcribe(audio, temperature=(0.0, -1.0))
    with pytest.raises(ConfigurationError, match="no_speech_threshold"):
        scripted.transcribe(audio, no_speech_threshold=1.5)
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ConfigurationError, match="best_of"):
            scripted.transcribe(audio, temperature=0.2, best_of=bad)


# --------------------------------------------------------------------------- the policy's pure functions


def test_compression_ratio_is_openais():
    assert compression_ratio("") == 0.0
    text = "the cat sat on the mat " * 10
    import zlib

    assert compression_ratio(text) == len(text.encode()) / len(zlib.compress(text.encode()))
    assert compression_ratio(text) > 2.4
    assert compression_ratio("A short sentence.") < 2.4


def test_rules():
    opts = LongformOptions()
    ok = WindowResult((1,), 0.0, avg_logprob=-0.3, no_speech_prob=0.01, compression_ratio=1.2)
    assert not needs_fallback(ok, opts) and not is_silence(ok, opts)
    unsure = WindowResult((1,), 0.0, avg_logprob=-1.5, no_speech_prob=0.01, compression_ratio=1.2)
    assert needs_fallback(unsure, opts) and not is_silence(unsure, opts)
    loop = WindowResult((1,), 0.0, avg_logprob=-0.3, no_speech_prob=0.01, compression_ratio=3.0)
    assert needs_fallback(loop, opts)
    silent = WindowResult((1,), 0.0, avg_logprob=-1.5, no_speech_prob=0.7, compression_ratio=1.2)
    assert is_silence(silent, opts) and not needs_fallback(silent, opts)
    unknown = WindowResult((1,), 0.0, avg_logprob=None, no_speech_prob=None, compression_ratio=1.0)
    assert not needs_fallback(unknown, opts) and not is_silence(unknown, opts)
    off = LongformOptions(compression_ratio_threshold=None, logprob_threshold=None, no_speech_threshold=None)
    assert not needs_fallback(loop, off) and not needs_fallback(unsure, off) and not is_silence(silent, off)


def test_previous_context_drops_the_last_of_two_ending_timestamps():
    def stamp(t: int) -> bool:
        return t >= 1000

    pieces = [(5, 6), (1000, 7, 8, 1010, 1010), (1010, 9, 1020)]
    assert previous_context(pieces, startofprev=99, limit=100, is_stamp=stamp) == [
        99, 5, 6, 1000, 7, 8, 1010, 1010, 9, 1020,
    ]  # fmt: skip
    assert previous_context(pieces, startofprev=99, limit=3, is_stamp=stamp) == [99, 1010, 9, 1020]
    assert previous_context([], startofprev=99, limit=3, is_stamp=stamp) == []


# --------------------------------------------------------------------------- end to end on the fixture


@pytest.fixture(scope="module")
def asr():
    with WhisperSpeechModel.builder().model_path(MODELS / "whisper").build() as model:
        yield model


@pytest.mark.parametrize("name", sorted(CASES))
def test_greedy_longform_matches_transformers(asr, name, monkeypatch):
    case = CASES[name]
    s = case["settings"]
    prompts: list[list[int]] = []
    backend = asr._parts.backend
    decode = backend.decode

    def recording(context, ids, *args):
        prompts.append(list(ids))
        return decode(context, ids, *args)

    monkeypatch.setattr(backend, "decode", recording)
    result = asr.transcribe(
        (clips()["long"], SAMPLE_RATE),
        language="en",
        timestamps=True,
        max_new_tokens=s["max_new_tokens"],
        temperature=0.0,
        logprob_threshold=s["logprob_threshold"],
        no_speech_threshold=s["no_speech_threshold"],
        condition_on_previous_text=s["condition_on_prev_tokens"],
        initial_prompt=s["prompt"],
    )
    assert prompts == [w["prompt"] for w in case["windows"]]
    assert list(result.token_ids) == case["token_ids"]
    assert result.text == case["text"]
    assert len(result.segments) == len(case["segments"])
    for got, want in zip(result.segments, case["segments"]):
        assert got.start == pytest.approx(min(want["start"], result.duration), abs=1e-6)
        assert got.end == pytest.approx(min(want["end"], result.duration), abs=1e-6)
        assert list(got.token_ids) == want["token_ids"]
    # each kept window's numbers are transformers' (its segments carry them)
    kept = [w for w in case["windows"] if not w["skipped"]]
    stats = sorted({(s.avg_logprob, s.no_speech_prob) for s in result.segments}, key=lambda x: -x[1])
    want = sorted({(w["avg_logprob"], w["no_speech_prob"]) for w in kept}, key=lambda x: -x[1])
    assert len(stats) == len(want)
    for (lp, ns), (wlp, wns) in zip(stats, want):
        assert lp == pytest.approx(wlp, abs=1e-4)
        assert ns == pytest.approx(wns, rel=1e-3, abs=1e-7)


def test_fallback_end_to_end(asr):
    """The tiny random model is unsure of everything: each window is retried up to the hottest temperature."""
    audio = (clips()["long"], SAMPLE_RATE)
    kwargs = dict(language="en", timestamps=True, max_new_tokens=24, temperature=FALLBACK_TEMPERATURES, seed=3)
    result = asr.transcribe(audio, **kwargs)
    assert result.segments
    opts = LongformOptions(temperatures=FALLBACK_TEMPERATURES)
    for seg in result.segments:
        judged = WindowResult((), seg.temperature, seg.avg_logprob, seg.no_speech_prob, seg.compression_ratio)
        # a kept window passed the thresholds, or was decoded at the last temperature
        assert seg.temperature == FALLBACK_TEMPERATURES[-1] or not needs_fallback(judged, opts)
    assert any(seg.temperature > 0 for seg in result.segments)
    assert asr.transcribe(audio, **kwargs) == result  # a seed makes the sampled attempts repeatable


# --------------------------------------------------------------------------- hallucination_silence_threshold


def _seg(start, end, words):
    from inference4py import Segment
    from inference4py.speech import Word

    return Segment(start, end, "".join(w[0] for w in words), (), words=tuple(Word(s, e, t, p) for t, s, e, p in words))


GOOD = [(" the", 0.5, 0.8, 0.9), (" cat", 0.8, 1.2, 0.9), (" sat", 1.2, 1.6, 0.8)]


def test_anomaly_scores_are_openais():
    from inference4py.speech import Word
    from inference4py.speech.decoding import is_segment_anomaly, word_anomaly_score

    assert word_anomaly_score(Word(0.0, 0.5, " ok", 0.9)) == 0.0
    assert word_anomaly_score(Word(0.0, 0.5, " ok", 0.1)) == 1.0
    assert word_anomaly_score(Word(0.0, 0.033, " ok", 0.9)) == pytest.approx(1.5)
    assert word_anomaly_score(Word(0.0, 3.0, " ok", 0.9)) == pytest.approx(1.0)
    assert not is_segment_anomaly(_seg(0.5, 1.6, GOOD))
    assert is_segment_anomaly(_seg(0.0, 0.1, [(" uh", 0.0, 0.1, 0.05)]))  # one unlikely, short word
    assert not is_segment_anomaly(_seg(0.0, 1.0, [])) and not is_segment_anomaly(None)
    # punctuation words are not judged
    assert not is_segment_anomaly(_seg(0.5, 1.6, [*GOOD, (".", 1.6, 1.6, 0.01)]))


def test_silence_cut_rules():
    from inference4py.speech.decoding import silence_cut

    common = {"threshold": 2.0, "window_frames": 3000, "content_frames": 9000, "last_speech": 0.0}
    ok = silence_cut([_seg(0.5, 1.6, GOOD)], seek=0, single_timestamp_ending=True, **common)
    assert (ok.keep, ok.seek, ok.skip, ok.last_speech) == (1, None, False, 1.6)
    # not a single ending: the text stops 28 s before the window ends -> next window at the last word
    early = silence_cut([_seg(0.5, 1.6, GOOD)], seek=0, single_timestamp_ending=False, **common)
    assert early.seek == 160
    # a hallucinated-looking first segment after 5 s of silence: the window is dropped, restart there
    ghost = [(" thanks", 35.0, 35.05, 0.05), (" for", 35.05, 35.1, 0.05)]
    skip = silence_cut([_seg(35.0, 35.1, ghost)], seek=3000, single_timestamp_ending=True, **common)
    assert skip.skip and skip.seek == 3500
    # a hallucination with silence on both sides after real speech: it and what follows are dropped
    ghost = [(" bye", 12.0, 12.02, 0.05)]
    cut = silence_cut(
        [_seg(0.5, 1.6, GOOD), _seg(12.0, 12.02, ghost), _seg(20.0, 21.0, [(" x", 20.0, 21.0, 0.9)])],
        seek=0,
        single_timestamp_ending=True,
        **common,
    )
    assert (cut.keep, cut.seek, cut.skip, cut.last_speech) == (1, 1200, False, 1.6)


def test_hallucination_silence_threshold_end_to_end(asr):
    audio = (clips()["long"], SAMPLE_RATE)
    kwargs = {"language": "en", "timestamps": True, "max_new_tokens": 24, "word_timestamps": True}
    plain = asr.transcribe(audio, **kwargs)
    judged = asr.transcribe(audio, hallucination_silence_threshold=1.0, **kwargs)
    # the random fixture's words are unlikely: some of its segments are judged hallucinations and dropped
    assert len(judged.token_ids) < len(plain.token_ids)
    assert "".join(s.text for s in judged.segments) == judged.text
    (batched,) = asr.transcribe_batch([audio], hallucination_silence_threshold=1.0, **kwargs)
    assert batched == judged
    with pytest.raises(ConfigurationError, match="word_timestamps=True"):
        asr.transcribe(audio, hallucination_silence_threshold=1.0, language="en")
