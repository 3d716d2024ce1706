"""Beam search and multiple samples on a scripted step model with known probabilities.

The fake model is a small Markov chain over 6 tokens (EOS = 0, prompt [5, 5, 5]);
its "cache" is the token history of each row, so a missing or wrong
``reorder`` feeds the wrong history and changes the probabilities.  With two
beams and five new tokens the search goes (probabilities of whole sequences):

    step 1  beams [1] .5, [2] .3                    ([3] .2 is dropped)
    step 2  [1, EOS] .3 finishes; beams [2,4] .27, [1,4] .2      -> reorder [1, 0]
    step 3  [2,4,EOS] .1485 finishes; [1,4,EOS] .12 is 3rd of the candidates,
            so it may not finish (only the first num_beams may);
            beams [2,4,4], [1,4,4]                                -> rows unchanged, no reorder
    step 4  [2,4,4,EOS] .066825 finishes
    step 5  the length limit: [2,4,4,4,EOS] .0300713 and [2,4,4,4,4] .0246038 finish

Scores are log-probabilities divided by ``generated_length ** length_penalty``
(the three prompt tokens are not counted), so the length penalty decides
between short and long hypotheses, and ``early_stopping`` decides when to stop.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from inference4py.errors import ConfigurationError
from inference4py.generation.beam import Hypothesis, beam_search, generate_sequences, returns_several
from inference4py.generation.config import GenerationConfig
from inference4py.generation.processors import make_logits_processors
from inference4py.generation.sampling import make_rng, make_sampler

EOS = 0
PROMPT = [5, 5, 5]
VOCAB = 6


def _probs(history: list[int]) -> dict[int, float]:
    last = history[-1]
    if last == EOS:
        raise AssertionError(f"a finished sequence was fed to the model: {history}")
    if last == 5:
        return {1: 0.5, 2: 0.3, 3: 0.2}
    if last == 1:
        return {EOS: 0.6, 4: 0.4}
    if last == 2:
        return {4: 0.9, EOS: 0.1}
    if last == 3:
        return {4: 1.0}
    # last == 4: after [1, 4] the odds differ from after [2, 4] or [4, 4]
    return {4: 0.4, EOS: 0.6} if history[-2] == 1 else {4: 0.45, EOS: 0.55}


class FakeModel:
    """A step model whose rows are token histories; logits = log of ``_probs``."""

    def __init__(self, *, encoder_decoder: bool = False) -> None:
        self.rows: list[list[int]] = []
        self.calls: list[tuple[str, object]] = []
        if encoder_decoder:
            self.sources = [0]
            self.expand_source = self._expand_source

    def _expand_source(self, indices) -> None:
        assert not self.rows, "expand_source must come before the first decoder step"
        self.sources = [self.sources[i] for i in indices]
        self.calls.append(("expand_source", list(map(int, indices))))

    def _logits(self) -> np.ndarray:
        out = np.full((len(self.rows), VOCAB), -np.inf, dtype=np.float32)
        for r, history in enumerate(self.rows):
            for token, p in _probs(history).items():
                out[r, token] = math.log(p)
        return out

    def prefill(self, input_ids, attention_mask=None) -> np.ndarray:
        ids = np.asarray(input_ids)
        self.calls.append(("prefill", ids.shape))
        self.rows = [list(map(int, row)) for row in ids]
        return self._logits()

    def step(self, tokens) -> np.ndarray:
        tokens = np.asarray(tokens)
        assert tokens.shape == (len(self.rows),), "one forward pass for all rows"
        self.calls.append(("step", tokens.tolist()))
        for row, token in zip(self.rows, tokens):
            row.append(int(token))
        return self._logits()

    def reorder(self, indices) -> None:
        indices = list(map(int, indices))
        self.calls.append(("reorder", indices))
        self.rows = [list(self.rows[i]) for i in indices]

    def count(self, kind: str) -> int:
        return sum(1 for name, _ in self.calls if name == kind)

    def reorders(self) -> list[list[int]]:
        return [arg for name, arg in self.calls if name == "reorder"]


def _config(**kw) -> GenerationConfig:
    base = dict(num_beams=2, num_return_sequences=2, max_new_tokens=5, eos_token_id=EOS)
    base.update(kw)
    return GenerationConfig(**base)


def _search(
    config: GenerationConfig, model: FakeModel | None = None, prompt=PROMPT
) -> tuple[list[Hypothesis], FakeModel]:
    model = model or FakeModel()
    hyps = beam_search(model, [prompt], config, processors=make_logits_processors(config, prompt_length=len(prompt)))
    return hyps[0], model


def _lp(p: float, length: int, penalty: float) -> float:
    return math.log(p) / length**penalty


A0 = (1, EOS)  # p .3
B1 = (2, 4, EOS)  # p .1485
LONG_EOS = (2, 4, 4, 4, EOS)  # p .0300713
LONG = (2, 4, 4, 4, 4)  # p .0246038

# (length_penalty, early_stopping) -> expected sequences, their probabilities, decoder steps run
EXPECTED = {
    (1.0, True): ([A0, B1], [0.3, 0.1485], 2),
    (1.0, False): ([A0, B1], [0.3, 0.1485], 2),  # best running -2.108/3 < worst finished -1.907/3
    (1.0, "never"): ([A0, B1], [0.3, 0.1485], 4),  # heuristic uses max length: runs to the end
    (2.0, True): ([B1, A0], [0.1485, 0.3], 2),  # stops once both slots are full
    (2.0, False): ([LONG_EOS, LONG], [0.3 * 0.9 * 0.45**2 * 0.55, 0.3 * 0.9 * 0.45**3], 4),
    (2.0, "never"): ([LONG_EOS, LONG], [0.3 * 0.9 * 0.45**2 * 0.55, 0.3 * 0.9 * 0.45**3], 4),
    (0.5, True): ([A0, B1], [0.3, 0.1485], 2),
    (0.5, False): ([A0, B1], [0.3, 0.1485], 2),
    (0.5, "never"): ([A0, B1], [0.3, 0.1485], 3),  # one more step, then no improvement possible
}


@pytest.mark.parametrize("penalty,early", list(EXPECTED), ids=[f"lp{p}-es{e}" for p, e in EXPECTED])
def test_length_penalty_and_early_stopping(penalty, early):
    hyps, model = _search(_config(length_penalty=penalty, early_stopping=early))
    sequences, probs, steps = EXPECTED[(penalty, early)]
    assert [h.token_ids for h in hyps] == sequences
    for hyp, seq, p in zip(hyps, sequences, probs):
        # the prompt (3 tokens) is not part of the length
        assert hyp.score == pytest.approx(_lp(p, len(seq), penalty), abs=1e-5)
        assert hyp.finish_reason == ("eos" if seq[-1] == EOS else "length")
    assert model.count("prefill") == 1 and model.count("step") == steps


def test_finished_hypothesis_needs_a_top_num_beams_rank():
    # At step 3, [1, 4, EOS] scores ln(.12)/9 = -0.2356, better than [1, EOS] (-0.301), but it is the
    # third candidate: transformers only lets the first num_beams candidates finish.
    hyps, _ = _search(_config(length_penalty=2.0, early_stopping=True))
    assert (1, 4, EOS) not in [h.token_ids for h in hyps]
    assert [h.token_ids for h in hyps] == [B1, A0]


def test_cache_follows_the_beams_and_identity_is_skipped():
    hyps, model = _search(_config(length_penalty=2.0, early_stopping=False))
    # expand after the single prefill; both step-1 beams extend beam 0; step 2 swaps;
    # steps 3 and 4 keep the rows in place (no reorder); nothing after the last step.
    assert model.reorders() == [[0, 0], [0, 0], [1, 0]]
    assert model.calls[0] == ("prefill", (1, 3))
    assert model.calls[-1][0] == "step"
    assert [h.token_ids for h in hyps] == [LONG_EOS, LONG]
    # the model's histories are the running beams
    assert model.rows == [[5, 5, 5, 2, 4, 4, 4], [5, 5, 5, 1, 4, 4, 4]]


def test_encoder_decoder_expands_the_source_before_the_first_step():
    model = FakeModel(encoder_decoder=True)
    hyps, _ = _search(_config(length_penalty=1.0), model=model, prompt=[5])
    assert model.calls[:2] == [("expand_source", [0, 0]), ("prefill", (2, 1))]
    assert model.reorders() == [[0, 0], [1, 0]]  # no expanding reorder: the prefill ran on both rows
    assert [h.token_ids for h in hyps] == [A0, B1]


def test_num_return_sequences_is_a_prefix():
    full, _ = _search(_config(length_penalty=2.0, early_stopping=False))
    one, _ = _search(_config(length_penalty=2.0, early_stopping=False, num_return_sequences=1))
    assert one == full[:1]


def test_length_limit_without_eos():
    # no EOS id (token 0 suppressed): every hypothesis ends at the length limit
    config = GenerationConfig(
        num_beams=2, num_return_sequences=2, max_new_tokens=3, eos_token_id=(), suppress_tokens=(0,)
    )
    hyps, model = _search(config)
    assert [h.token_ids for h in hyps] == [(2, 4, 4), (1, 4, 4)]
    assert [h.finish_reason for h in hyps] == ["length", "length"]
    assert hyps[0].score == pytest.approx(math.log(0.3 * 0.9 * 0.45) / 3, abs=1e-5)
    assert hyps[1].score == pytest.approx(math.log(0.5 * 0.4 * 0.4) / 3, abs=1e-5)
    assert model.count("step") == 2


def test_processors_see_the_beams_and_apply_to_log_probs():
    seen: list[np.ndarray] = []

    def spy(ids, scores):
        seen.append(ids.copy())
        return scores

    config = _config(length_penalty=1.0, early_stopping=True)
    model = FakeModel()
    beam_search(model, [PROMPT], config, processors=[spy])
    assert seen[0].tolist() == [PROMPT, PROMPT]
    assert seen[1].tolist() == [[5, 5, 5, 1], [5, 5, 5, 2]]
    assert seen[2].tolist() == [[5, 5, 5, 2, 4], [5, 5, 5, 1, 4]]


def test_min_new_tokens_blocks_eos_in_beams():
    config = _config(length_penalty=1.0, early_stopping=True, min_new_tokens=3)
    hyps, _ = _search(config)
    assert all(len(h.token_ids) >= 3 for h in hyps)


def test_more_return_sequences_than_beams_is_refused():
    with pytest.raises(ConfigurationError, match="num_beams"):
        GenerationConfig(num_beams=2, num_return_sequences=3)
    with pytest.raises(ConfigurationError, match="num_beams"):
        GenerationConfig(num_beams=0)
    sampled = GenerationConfig(num_beams=2, num_return_sequences=3, do_sample=True, eos_token_id=EOS)
    with pytest.raises(ConfigurationError, match="Raise num_beams"):
        beam_search(FakeModel(), [PROMPT], sampled, rng=make_rng(0))


def test_beam_sampling_is_seeded_and_returns_num_beams_hypotheses():
    config = GenerationConfig(
        num_beams=2, num_return_sequences=2, do_sample=True, top_k=0, max_new_tokens=5, eos_token_id=EOS, seed=3
    )
    runs = [beam_search(FakeModel(), [PROMPT], config, rng=make_rng(3))[0] for _ in range(2)]
    assert runs[0] == runs[1]
    assert len(runs[0]) == 2
    for hyp in runs[0]:
        assert hyp.score is not None and hyp.score <= 0
        assert hyp.token_ids[0] in (1, 2, 3)


def test_returns_several():
    assert not returns_several(GenerationConfig())
    assert returns_several(GenerationConfig(num_beams=2))
    assert returns_several(GenerationConfig(do_sample=True, num_return_sequences=2))


# ---------------------------------------------------------------------------------- samples
class SampleModel(FakeModel):
    """Every row: EOS with probability .3, else one of 1..4."""

    def _logits(self) -> np.ndarray:
        logp = np.log([0.3, 0.2, 0.2, 0.15, 0.15]).tolist() + [-np.inf]  # the pad id is never drawn
        return np.tile(np.asarray(logp, dtype=np.float32), (len(self.rows), 1))


def _sample(n: int, seed: int, pad: int | None = 5):
    config = GenerationConfig(
        do_sample=True,
        top_k=0,
        num_return_sequences=n,
        max_new_tokens=12,
        eos_token_id=EOS,
        pad_token_id=pad,
        seed=seed,
    )
    model = SampleModel()
    hyps = generate_sequences(
        model,
        PROMPT,
        config,
        processors=make_logits_processors(config, prompt_length=3),
        sampler=make_sampler(config),
        rng=make_rng(seed),
    )
    return hyps, model


def test_samples_prefill_once_expand_and_stop_each_on_its_own_eos():
    hyps, model = _sample(6, seed=1)
    assert len(hyps) == 6
    assert model.calls[0] == ("prefill", (1, 3)) and model.calls[1] == ("reorder", [0] * 6)
    for hyp in hyps:
        assert hyp.score is None
        assert EOS not in hyp.token_ids[:-1]
        assert hyp.finish_reason == ("eos" if hyp.token_ids[-1] == EOS else "length")
        assert 1 <= len(hyp.token_ids) <= 12
    assert len({h.token_ids for h in hyps}) > 1
    # finished rows were fed the pad id (5) until every row was done; the last token is never fed
    longest = max(len(h.token_ids) for h in hyps)
    for row, hyp in zip(model.rows, hyps):
        assert row[3:] == (list(hyp.token_ids) + [5] * 12)[: longest - 1]
    # vectorised: one forward pass per step for all rows
    assert all(len(arg) == 6 for name, arg in model.calls if name == "step")


def test_samples_are_reproducible_with_a_seed():
    assert _sample(4, seed=7)[0] == _sample(4, seed=7)[0]
    assert _sample(4, seed=7)[0] != _sample(4, seed=8)[0]


def test_samples_pad_defaults_to_the_first_eos():
    hyps, model = _sample(3, seed=2, pad=None)
    longest = max(len(h.token_ids) for h in hyps)
    for row, hyp in zip(model.rows, hyps):
        assert row[3:] == (list(hyp.token_ids) + [EOS] * 12)[: longest - 1]


def test_several_samples_choose_through_the_rows_chooser():
    """sample_sequences' rows: one sampler call a step, each row ended by sequence_finished, NaN refused."""
    from inference4py.errors import InferenceError
    from inference4py.generation.search import RowsChooser

    config = GenerationConfig(do_sample=True, top_k=1, max_new_tokens=3, eos_token_id=2)
    chooser = RowsChooser(
        np.zeros((2, 1), dtype=np.int64),
        config,
        processors=[],
        sampler=make_sampler(config),
        rng=make_rng(0),
        pad_id=9,
    )
    logits = np.zeros((2, 10), dtype=np.float32)
    logits[0, 2] = logits[1, 5] = 5.0  # row 0 ends with EOS, row 1 goes on
    assert chooser.choose(logits.copy()).tolist() == [2, 5] and chooser.ended == [True, False]
    assert chooser.choose(logits.copy()).tolist() == [9, 5]  # an ended row takes the pad id
    assert not chooser.finished
    assert chooser.choose(logits.copy()).tolist() == [9, 5] and chooser.finished  # max_new_tokens
    assert (chooser.new_ids(0), chooser.new_ids(1)) == ((2,), (5, 5, 5))
    broken = RowsChooser(
        np.zeros((2, 1), dtype=np.int64), config, processors=[], sampler=make_sampler(config), rng=make_rng(0), pad_id=9
    )
    with pytest.raises(InferenceError, match="NaN logits"):
        broken.choose(np.full((2, 10), np.nan, dtype=np.float32))
