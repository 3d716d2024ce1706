"""Speculative decoding (generation/speculative.py): the output of plain decoding, fewer passes.

Greedy: the ids of plain greedy on every decoder fixture, with prompt lookup and with draft
models, cut by max_new_tokens, EOS and stop strings in the middle of a draft.  Sampling: the
distribution of plain sampling, checked exactly on a bigram model whose distributions are
known, and against plain sampling on a real fixture (chi-square tests, fixed seeds).
"""

from __future__ import annotations

import itertools
import math
from collections import Counter

import numpy as np
import pytest

from inference4py import OnnxTextGenerator
from inference4py.cli import main
from inference4py.errors import ConfigurationError
from inference4py.generation.config import GenerationConfig
from inference4py.generation.processors import make_logits_processors
from inference4py.generation.sampling import make_rng, make_sampler
from inference4py.generation.search import TokenChooser
from inference4py.generation.speculative import (
    DraftLength,
    DraftModel,
    DraftModelProposer,
    PromptLookup,
    PromptLookupProposer,
    _Counts,
    resolve_speculative,
    speculative_tokens,
)
from tests.conftest import MODELS

# Every decoder-only fixture, and a draft of the same vocabulary but other weights for each.
DECODERS = [
    "gemma",
    "genai-gemma3",
    "genai-gemma3-int4",
    "genai-llama",
    "genai-llama-int4",
    "genai-mistral",
    "genai-qwen2",
    "gpt2",
    "gpt2-inference4j",
    "llama",
    "llama-fp16",
    "llama-h16",
    "llama-merged",
    "mistral",
    "phi3",
    "qwen2",
    "qwen2-h16",
    "qwen3",
]
OTHER_DRAFT = {name: "mistral" for name in DECODERS}
OTHER_DRAFT.update({"mistral": "llama", "gpt2": "gpt2-inference4j", "gpt2-inference4j": "gpt2"})
OTHER_DRAFT.update({n: "qwen3" for n in ("genai-qwen2", "qwen2", "qwen2-h16")} | {"qwen3": "qwen2"})

REPETITIVE = "the cat sat on the mat. the cat sat on the mat. the cat sat on the mat. the dog"
PLAIN_TEXT = "Once upon a time there was a little girl who lived"

_models: dict[str, OnnxTextGenerator] = {}
AS_IS = ":as-is"  # a fixture run as exported (a growing cache), not fused


def model(name: str) -> OnnxTextGenerator:
    if name not in _models:
        folder, _, variant = name.partition(":")
        builder = OnnxTextGenerator.builder().model_path(MODELS / folder)
        if variant == "as-is":
            builder = builder.fuse_attention(False)
        _models[name] = builder.build()
    return _models[name]


# every decoder as loaded by default, and the optimum exports also as they are (growing caches)
VARIANTS = DECODERS + [n + AS_IS for n in DECODERS if not n.startswith("genai-")]


def greedy(name: str, prompt, **options):
    return model(name).generate(prompt, do_sample=False, **options)


# ---------------------------------------------------------------------------------- greedy
@pytest.mark.parametrize("name", VARIANTS)
def test_prompt_lookup_gives_plain_greedy_ids_on_every_decoder(name):
    gen = model(name)
    plain = greedy(name, REPETITIVE, max_new_tokens=20)
    # The model's own continuation pasted back into the prompt: the lookup finds it and must hit.
    echo = gen.encode_prompt(REPETITIVE) + list(plain.token_ids) + gen.encode_prompt(REPETITIVE)
    hits = 0
    for prompt in (REPETITIVE, PLAIN_TEXT, echo):  # (within the fixtures' 128 positions)
        expected = greedy(name, prompt, max_new_tokens=30)
        for speculative in ("prompt_lookup", PromptLookup(min_ngram=1, num_draft_tokens=2, max_draft_tokens=6)):
            result = greedy(name, prompt, max_new_tokens=30, speculative=speculative)
            assert result.token_ids == expected.token_ids
            assert result.text == expected.text
            assert result.finish_reason == expected.finish_reason
            stats = result.speculative
            assert stats is not None and stats.method == "prompt_lookup"
            assert 0 <= stats.accepted_tokens <= stats.drafted_tokens
            # each pass yields its accepted drafts and one token of its own; the first token comes from the prompt
            assert stats.target_passes + stats.accepted_tokens == result.generated_tokens - 1
            hits += stats.drafted_tokens
    assert hits > 0


@pytest.mark.parametrize("name", VARIANTS)
def test_draft_models_give_plain_greedy_ids_on_every_decoder(name):
    totals = Counter()
    for prompt in (REPETITIVE, PLAIN_TEXT):
        expected = greedy(name, prompt, max_new_tokens=30)
        # timed=False: the counts below must not depend on how long passes take
        self_draft = DraftModel(model(name), num_draft_tokens=3, timed=False)
        same = greedy(name, prompt, max_new_tokens=30, speculative=self_draft)
        other = greedy(
            name, prompt, max_new_tokens=30, speculative=DraftModel(model(OTHER_DRAFT[name.partition(":")[0]]))
        )
        assert same.token_ids == expected.token_ids
        assert other.token_ids == expected.token_ids
        totals.update(
            generated=expected.generated_tokens,
            same_drafted=same.speculative.drafted_tokens,
            same_accepted=same.speculative.accepted_tokens,
            same_passes=same.speculative.target_passes,
            other_drafted=other.speculative.drafted_tokens,
        )
    # the model drafting for itself guesses right (up to rounding between one and several tokens per pass)
    assert totals["same_accepted"] >= 0.8 * totals["same_drafted"] > 0
    assert totals["same_passes"] < totals["generated"] // 2
    assert totals["other_drafted"] > 0


@pytest.mark.parametrize("name", ["llama", "llama" + AS_IS, "genai-llama", "genai-llama-int4"])
@pytest.mark.parametrize("max_new_tokens", [1, 2, 3, 7, 12])
def test_max_new_tokens_cuts_a_draft_and_is_never_passed(name, max_new_tokens):
    expected = greedy(name, REPETITIVE, max_new_tokens=max_new_tokens)
    spec = DraftModel(model(name), num_draft_tokens=8, max_draft_tokens=8)
    result = greedy(name, REPETITIVE, max_new_tokens=max_new_tokens, speculative=spec)
    assert result.token_ids == expected.token_ids
    assert result.generated_tokens == max_new_tokens
    assert result.finish_reason == "length"
    assert result.speculative.drafted_tokens <= max_new_tokens - 1


@pytest.mark.parametrize("name", ["llama", "qwen2" + AS_IS, "genai-qwen2"])
def test_eos_in_the_middle_of_a_draft_ends_there(name):
    plain = greedy(name, PLAIN_TEXT, max_new_tokens=30).token_ids
    position = next(i for i in range(3, len(plain)) if plain[i] not in plain[:i])  # a first occurrence
    eos = plain[position]
    expected = greedy(name, PLAIN_TEXT, max_new_tokens=30, eos_token_id=(eos,))
    assert expected.token_ids == plain[: position + 1] and expected.finish_reason == "eos"
    spec = DraftModel(model(name), num_draft_tokens=8, max_draft_tokens=8)
    result = greedy(name, PLAIN_TEXT, max_new_tokens=30, eos_token_id=(eos,), speculative=spec)
    assert result.token_ids == expected.token_ids
    assert result.finish_reason == "eos"
    assert result.text == expected.text


@pytest.mark.parametrize("name", ["llama", "gpt2", "gpt2" + AS_IS, "genai-llama"])
def test_a_stop_string_in_the_middle_of_a_draft_ends_there(name):
    full = greedy(name, PLAIN_TEXT, max_new_tokens=30)
    stop = full.text[len(full.text) // 3 :][:3]
    assert stop.strip()
    expected = greedy(name, PLAIN_TEXT, max_new_tokens=30, stop_sequences=(stop,))
    assert expected.finish_reason == "stop"
    spec = DraftModel(model(name), num_draft_tokens=8, max_draft_tokens=8)
    result = greedy(name, PLAIN_TEXT, max_new_tokens=30, stop_sequences=(stop,), speculative=spec)
    assert (result.text, result.token_ids, result.finish_reason) == (
        expected.text,
        expected.token_ids,
        expected.finish_reason,
    )
    assert stop not in result.text
    # the stream stopped the loop: no pass after the stop (passes + accepted drafts = tokens - 1)
    stats = result.speculative
    assert stats.target_passes + stats.accepted_tokens <= result.generated_tokens


@pytest.mark.parametrize("name", ["llama", "genai-llama-int4"])
def test_streaming_gives_the_same_pieces(name):
    gen = model(name)
    spec = DraftModel(gen, num_draft_tokens=4)
    expected = greedy(name, REPETITIVE, max_new_tokens=25)
    pieces: list[str] = []
    result = greedy(name, REPETITIVE, max_new_tokens=25, speculative=spec, on_token=pieces.append)
    assert "".join(pieces) == expected.text == result.text
    assert "".join(gen.stream(REPETITIVE, max_new_tokens=25, do_sample=False, speculative=spec)) == expected.text
    stream = gen.stream_chunks(REPETITIVE, max_new_tokens=25, do_sample=False, speculative="prompt_lookup")
    chunks = list(stream)
    assert tuple(c.token_id for c in chunks if c.token_id is not None) == expected.token_ids
    assert chunks[-1].finish_reason == expected.finish_reason
    assert stream.speculative.target_passes + stream.speculative.accepted_tokens == len(expected.token_ids) - 1


def test_processors_see_each_verified_positions_own_history():
    options = dict(
        max_new_tokens=30, repetition_penalty=1.5, no_repeat_ngram_size=3, min_new_tokens=10, frequency_penalty=0.5
    )
    for name in ("llama", "llama" + AS_IS, "genai-llama"):
        expected = greedy(name, REPETITIVE, **options)
        for spec in ("prompt_lookup", DraftModel(model(name)), DraftModel(model("mistral"))):
            assert greedy(name, REPETITIVE, speculative=spec, **options).token_ids == expected.token_ids


def test_logprobs_and_prompt_logprobs_match_plain_decoding():
    options = dict(max_new_tokens=15, logprobs=True, top_logprobs=3, prompt_logprobs=True)
    expected = greedy("llama", REPETITIVE, **options)
    result = greedy("llama", REPETITIVE, speculative=DraftModel(model("llama")), **options)
    assert result.token_ids == expected.token_ids
    assert [e.token_id for e in result.logprobs] == list(expected.token_ids)
    np.testing.assert_allclose(
        [e.logprob for e in result.logprobs], [e.logprob for e in expected.logprobs], rtol=0, atol=1e-4
    )
    assert [[t.token_id for t in e.top_logprobs] for e in result.logprobs] == [
        [t.token_id for t in e.top_logprobs] for e in expected.logprobs
    ]
    assert len(result.prompt_logprobs) == result.prompt_tokens


def test_a_json_schema_constraint_holds_under_speculation():
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    for name in ("llama", "qwen2"):
        expected = greedy(name, "Answer in JSON:", max_new_tokens=20, json_schema=schema)
        for spec in ("prompt_lookup", DraftModel(model(name))):
            result = greedy(name, "Answer in JSON:", max_new_tokens=20, json_schema=schema, speculative=spec)
            assert result.token_ids == expected.token_ids


# ---------------------------------------------------------------------------------- sampling
class BigramModel:
    """A step model whose logits depend on the last token only, so every distribution is known exactly."""

    def __init__(self, table: np.ndarray) -> None:
        self.table = table.astype(np.float32)  # [vocab, vocab]: row = last token
        self.tokens: list[int] = []
        self.keep_prefill_logits = False
        self.prefill_logits: np.ndarray | None = None

    @property
    def length(self) -> int:
        return len(self.tokens)

    def prefill(self, input_ids, attention_mask=None) -> np.ndarray:
        ids = np.asarray(input_ids, dtype=np.int64).reshape(-1).tolist()
        self.tokens += ids
        rows = self.table[ids]  # [n, vocab]
        if self.keep_prefill_logits:
            self.prefill_logits = rows[None].copy()
        return rows[-1:].copy()

    def step(self, tokens) -> np.ndarray:
        return self.prefill(tokens)

    def rewind(self, length: int) -> None:
        del self.tokens[length:]

    def discard(self, count: int) -> None:
        self.rewind(len(self.tokens) - count)


VOCAB = 6
CONFIG = GenerationConfig(do_sample=True, temperature=0.8, top_k=4, repetition_penalty=1.3, max_new_tokens=3)


def exact_distribution(table: np.ndarray, prompt: list[int], config: GenerationConfig) -> dict[tuple, float]:
    """P(first 3 tokens) computed independently: penalty over the history, temperature, top-k, softmax."""

    def step(history: list[int]) -> np.ndarray:
        x = table[history[-1]].astype(np.float64)
        for t in set(history):
            x[t] = x[t] * config.repetition_penalty if x[t] < 0 else x[t] / config.repetition_penalty
        x = x / config.temperature
        kth = np.sort(x)[-config.top_k]
        x[x < kth] = -np.inf
        p = np.exp(x - x.max())
        return p / p.sum()

    out = {}
    for path in itertools.product(range(VOCAB), repeat=3):
        prob, history = 1.0, list(prompt)
        for t in path:
            prob *= step(history)[t]
            history.append(t)
        if prob > 0:
            out[path] = prob
    return out


def chi_square_limit(df: int, z: float = 4.265) -> float:
    """The chi-square quantile at upper tail probability ~1e-5 (z = 4.265), by Wilson-Hilferty."""
    return df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3


def goodness_of_fit(counts: Counter, expected: dict[tuple, float], n: int) -> tuple[float, int]:
    """Pearson's statistic over outcomes with expected count >= 5 (the rest pooled), and its degrees of freedom."""
    stat, pooled_obs, pooled_exp, cells = 0.0, 0, 0.0, 0
    for outcome, p in expected.items():
        e = p * n
        if e >= 5:
            stat += (counts.get(outcome, 0) - e) ** 2 / e
            cells += 1
        else:
            pooled_obs += counts.get(outcome, 0)
            pooled_exp += e
    pooled_obs += sum(c for o, c in counts.items() if o not in expected)
    if pooled_exp >= 5:
        stat += (pooled_obs - pooled_exp) ** 2 / pooled_exp
        cells += 1
    return stat, cells - 1


def sample_paths(proposer_for, table, prompt, n) -> tuple[Counter, _Counts]:
    counts = _Counts("test")
    paths: Counter = Counter()
    for seed in range(n):
        chooser = TokenChooser(
            prompt,
            CONFIG,
            processors=make_logits_processors(CONFIG, prompt_length=len(prompt)),
            sampler=make_sampler(CONFIG),
            rng=make_rng(seed),
        )
        tokens = speculative_tokens(
            BigramModel(table), chooser, proposer_for(chooser), CONFIG, lengths=DraftLength(2, 4), counts=counts
        )
        paths[tuple(tokens)] += 1
    return paths, counts


@pytest.mark.parametrize("draft", ["prompt_lookup", "draft_model"])
def test_speculative_sampling_keeps_the_exact_distribution(draft):
    rng = np.random.default_rng(7)
    table = rng.normal(0, 1.5, (VOCAB, VOCAB))
    # the bigram's most likely next token after each token, so that lookups draft plausible tokens
    best = table.argmax(axis=1)
    prompt = [0, int(best[0]), int(best[best[0]]), 0, int(best[0])]
    if draft == "prompt_lookup":
        proposer_for = lambda chooser: PromptLookupProposer(PromptLookup(min_ngram=1))  # noqa: E731
    else:
        other = table + rng.normal(0, 1.0, table.shape)  # another model: q differs from p

        def proposer_for(chooser):
            return DraftModelProposer(BigramModel(other), CONFIG, prompt_length=len(prompt), rng=chooser.rng)

    n = 6000
    paths, counts = sample_paths(proposer_for, table, prompt, n)
    expected = exact_distribution(table, prompt, CONFIG)
    stat, df = goodness_of_fit(paths, expected, n)
    assert stat < chi_square_limit(df), (stat, df)
    # both branches of the rule ran many times
    assert counts.accepted > 300
    assert counts.drafted - counts.accepted > 300


def test_the_exact_check_catches_a_wrong_rule():
    """The statistic above has power: always keeping drafts (no rejection rule) fails it."""
    rng = np.random.default_rng(7)
    table = rng.normal(0, 1.5, (VOCAB, VOCAB))
    best = table.argmax(axis=1)
    prompt = [0, int(best[0]), int(best[best[0]]), 0, int(best[0])]
    paths: Counter = Counter()
    for seed in range(6000):  # the draft kept whenever there is one, plain sampling otherwise
        chooser = TokenChooser(
            prompt,
            CONFIG,
            processors=make_logits_processors(CONFIG, prompt_length=len(prompt)),
            sampler=make_sampler(CONFIG),
            rng=make_rng(seed),
        )
        lookup = PromptLookupProposer(PromptLookup(min_ngram=1))
        model_ = BigramModel(table)
        logits = model_.prefill(np.array([prompt]))
        path = []
        while len(path) < 3:
            drafts, _ = lookup.propose(chooser.ids, 1)
            token = int(drafts[0]) if drafts.size else None
            if token is None:
                token = chooser.choose(logits)
            else:
                chooser.append(token)
            path.append(token)
            logits = model_.step(np.array([token]))
        paths[tuple(path)] += 1
    stat, df = goodness_of_fit(paths, exact_distribution(table, prompt, CONFIG), 6000)
    assert stat > chi_square_limit(df)


def _first_tokens(gen, prompt, n, seeds, **options):
    return [gen.generate(prompt, max_new_tokens=n, seed=s, **options).token_ids for s in seeds]


def homogeneity(a: list[int], b: list[int]) -> tuple[float, int]:
    """Two-sample chi-square statistic over tokens seen >= 10 times in all (the rest pooled), and df."""
    ca, cb = Counter(a), Counter(b)
    total = ca + cb
    cells = [[ca[t], cb[t]] for t in total if total[t] >= 10]
    rest = [sum(ca[t] for t in total if total[t] < 10), sum(cb[t] for t in total if total[t] < 10)]
    if sum(rest) >= 10:
        cells.append(rest)
    na, nb = len(a), len(b)
    stat = 0.0
    for x, y in cells:
        ex, ey = (x + y) * na / (na + nb), (x + y) * nb / (na + nb)
        stat += (x - ex) ** 2 / ex + (y - ey) ** 2 / ey
    return stat, len(cells) - 1


def test_speculative_sampling_matches_plain_sampling_on_a_real_model():
    gen = model("llama")
    plain_ids = greedy("llama", "a b a b a b a b", max_new_tokens=12).token_ids
    prompt = gen.encode_prompt("a b a b a b a b") + list(plain_ids) + gen.encode_prompt("a b a b a b a b")
    options = dict(do_sample=True, temperature=0.3, top_k=20)
    seeds = range(700)
    plain = _first_tokens(gen, prompt, 3, seeds, **options)
    for spec in (PromptLookup(min_ngram=1), DraftModel(model("llama-fp16"))):
        drafted = _first_tokens(gen, prompt, 3, [s + 100_000 for s in seeds], speculative=spec, **options)
        for position in range(3):
            stat, df = homogeneity([t[position] for t in plain], [t[position] for t in drafted])
            assert df >= 2
            assert stat < chi_square_limit(df), (spec, position, stat, df)


def test_sampling_without_a_draft_is_plain_sampling_token_for_token():
    """A pass with nothing drafted is a plain step: same seed, same tokens (no lookup hit in this prompt)."""
    gen = model("llama")
    options = dict(do_sample=True, temperature=1.0, top_k=0, max_new_tokens=8, seed=3)
    result = gen.generate(PLAIN_TEXT, speculative=PromptLookup(min_ngram=3, max_ngram=3), **options)
    assert result.speculative.drafted_tokens == 0
    assert result.token_ids == gen.generate(PLAIN_TEXT, **options).token_ids


# ---------------------------------------------------------------------------------- units
def test_prompt_lookup_proposes_what_followed_the_latest_match():
    lookup = PromptLookupProposer(PromptLookup(max_ngram=3, min_ngram=1))
    context = np.array([5, 1, 2, 3, 9, 9, 1, 2, 3, 7, 8, 4, 1, 2, 3], dtype=np.int64)
    drafts, dists = lookup.propose(context, 2)
    assert drafts.tolist() == [7, 8] and dists is None  # [1, 2, 3] last seen before 7, 8
    assert lookup.propose(context, 5)[0].tolist() == [7, 8, 4, 1, 2]
    # a match near the end with fewer than k tokens after it loses to an earlier full one
    assert lookup.propose(np.array([4, 6, 1, 2, 4, 4], dtype=np.int64), 2)[0].tolist() == [6, 1]
    assert lookup.propose(np.array([1, 2, 3], dtype=np.int64), 3)[0].size == 0
    bigram_only = PromptLookupProposer(PromptLookup(max_ngram=2, min_ngram=2))
    assert bigram_only.propose(np.array([3, 1, 7, 2, 1], dtype=np.int64), 2)[0].size == 0


def test_draft_length_grows_on_full_acceptance_and_shrinks_on_rejection():
    lengths = DraftLength(4, 8)
    assert lengths.next() == 4
    lengths.update(4, 4)
    assert lengths.next() == 6
    lengths.update(6, 6)
    lengths.update(8, 8)
    assert lengths.next() == 8
    lengths.update(2, 8)  # something kept: shorter, no pause
    assert lengths.next() == 7
    lengths.update(0, 0)  # nothing drafted: unchanged
    assert lengths.next() == 7


def test_failing_drafts_pause_drafting_longer_each_time_until_one_is_kept():
    lengths = DraftLength(3, 8)
    pauses = []
    for _ in range(6):
        lengths.update(0, 2)  # a draft with nothing kept
        paused = 0
        while lengths.next() == 0:
            paused += 1
        pauses.append(paused)
    assert pauses == [1, 3, 7, 15, 15, 15]
    assert lengths.next() == 1  # shrunk by each rejection
    lengths.update(1, 2)  # a kept token ends the back-off
    lengths.update(0, 2)
    assert [lengths.next(), lengths.next()] == [0, 1]


# ---------------------------------------------------------------------------------- refusals
@pytest.mark.parametrize(
    "options,match",
    [
        ({"num_beams": 2}, "num_beams"),
        ({"num_beams": 2, "num_return_sequences": 2}, "num_beams"),
        ({"do_sample": True, "num_return_sequences": 2}, "num_return_sequences"),
    ],
)
def test_beam_search_and_several_sequences_are_refused(options, match):
    with pytest.raises(ConfigurationError, match=match):
        model("llama").generate("Hi", max_new_tokens=4, speculative="prompt_lookup", **options)


def test_batches_are_refused():
    gen = model("llama")
    with pytest.raises(ConfigurationError, match="generate_batch does not draft.*speculative"):
        gen.generate_batch(["Hi", "Ho"], max_new_tokens=4, speculative="prompt_lookup")
    batched = gen.batched()
    try:
        with pytest.raises(ConfigurationError, match="Drop speculative"):
            batched.generate("Hi", max_new_tokens=4, speculative="prompt_lookup")
    finally:
        batched.close()


def test_bad_settings_are_refused():
    with pytest.raises(ConfigurationError, match="speculative='prompt_lookup'"):
        model("llama").generate("Hi", max_new_tokens=4, speculative="ngram")
    with pytest.raises(ConfigurationError, match="min_ngram"):
        PromptLookup(min_ngram=0)
    with pytest.raises(ConfigurationError, match="min_ngram"):
        PromptLookup(max_ngram=2, min_ngram=3)
    with pytest.raises(ConfigurationError, match="num_draft_tokens"):
        DraftModel(model("llama"), num_draft_tokens=0)
    with pytest.raises(ConfigurationError, match="max_draft_tokens"):
        PromptLookup(num_draft_tokens=5, max_draft_tokens=4)
    with pytest.raises(ConfigurationError, match="timed"):
        PromptLookup(timed="no")
    with pytest.raises(ConfigurationError, match="loaded OnnxTextGenerator"):
        model("llama").generate("Hi", max_new_tokens=4, speculative=DraftModel(str(MODELS / "llama")))
    assert resolve_speculative(None) is None and resolve_speculative(False) is None
    assert resolve_speculative("prompt_lookup") == PromptLookup()


def test_a_draft_model_with_another_vocabulary_is_refused():
    with pytest.raises(ConfigurationError, match="vocabulary differs.*prompt_lookup"):
        model("llama").generate("Hi", max_new_tokens=4, speculative=DraftModel(model("gpt2")))
    with pytest.raises(ConfigurationError, match="vocabulary differs"):
        model("qwen2").generate("Hi", max_new_tokens=4, speculative=DraftModel(model("llama")))


def test_a_closed_draft_model_is_refused():
    draft = OnnxTextGenerator.builder().model_path(MODELS / "llama").build()
    draft.close()
    with pytest.raises(Exception, match="closed"):
        model("llama").generate("Hi", max_new_tokens=4, speculative=DraftModel(draft))


def test_encoder_decoder_models_refuse_it_by_name():
    from inference4py import FlanT5TextGenerator

    with (
        FlanT5TextGenerator.builder().model_path(MODELS / "t5").build() as t5,
        pytest.raises(ConfigurationError, match="speculative"),
    ):
        t5.generate("translate: hi", max_new_tokens=4, speculative="prompt_lookup")


# ---------------------------------------------------------------------------------- CLI
@pytest.mark.parametrize(
    "flags", [["--speculative", "prompt_lookup"], ["--draft-model", str(MODELS / "mistral")]], ids=["lookup", "draft"]
)
def test_cli_generate_speculative_prints_the_plain_text(flags, capsys):
    args = ["generate", "-m", str(MODELS / "llama"), "--greedy", "--max-new-tokens", "16"]
    assert main([*args, REPETITIVE]) == 0
    plain = capsys.readouterr().out
    assert main([*args, *flags, REPETITIVE]) == 0
    assert capsys.readouterr().out == plain


def test_the_builder_sets_a_default_that_a_call_can_turn_off():
    gen = OnnxTextGenerator.builder().model_path(MODELS / "llama").speculative().max_new_tokens(12).build()
    expected = greedy("llama", REPETITIVE, max_new_tokens=12)
    result = gen.generate(REPETITIVE, do_sample=False)
    assert result.token_ids == expected.token_ids
    assert result.speculative is not None and result.speculative.method == "prompt_lookup"
    assert gen.generate(REPETITIVE, do_sample=False, speculative=None).speculative is None
    drafted = gen.generate(REPETITIVE, do_sample=False, speculative=DraftModel(model("mistral")))
    assert drafted.speculative.method == "draft_model" and drafted.token_ids == expected.token_ids
    pretrained = OnnxTextGenerator.from_pretrained(str(MODELS / "llama"), speculative="prompt_lookup")
    assert pretrained.generate(REPETITIVE, max_new_tokens=12, do_sample=False).speculative is not None
    with pytest.raises(ConfigurationError, match="speculative="):
        OnnxTextGenerator.builder().speculative("medusa")


def test_greedy_cuts_drafts_to_what_the_measured_pass_costs_pay_for():
    cheap = DraftLength(8, 8, timed=True)
    cheap.observe(0, 0.010)
    cheap.observe(4, 0.012)  # 5% of a step per drafted position
    for _ in range(5):
        cheap.update(3, 4)  # three of four kept: a draft token is kept ~75% of the time
    cheap.current = 8
    assert cheap.next() >= 5
    dear = DraftLength(8, 8, timed=True)
    dear.observe(0, 0.010)
    dear.observe(4, 0.030)  # 50% of a step per drafted position
    for _ in range(5):
        dear.update(3, 4)
    dear.current = 8
    assert 1 <= dear.next() <= 3
    hopeless = DraftLength(4, 8, timed=True)
    hopeless.observe(0, 0.010)
    hopeless.observe(2, 0.020)
    for _ in range(5):
        hopeless.update(1, 4)  # one in four kept: no draft length pays at 50% per position
    assert [hopeless.next() for _ in range(9)] == [0] * 8 + [1]  # paused, then a one-token probe
    sampled = DraftLength(4, 8)  # sampling: timings are ignored, the output stays seeded
    sampled.observe(0, 0.010)
    sampled.observe(2, 0.050)
    assert sampled.next() == 4


@pytest.mark.parametrize("name", ["llama" + AS_IS, "gpt2" + AS_IS, "genai-llama"])
def test_discarding_rejected_drafts_leaves_the_cache_of_the_kept_tokens(name):
    runtime = model(name)._runtime
    prompt = np.array([model(name).encode_prompt(PLAIN_TEXT)])
    plain = runtime.new_state(1, capacity=64)
    plain.prefill(prompt)
    expected = [plain.step(np.array([t])).copy() for t in (7, 9, 11, 13)]  # after 7, 9, 11, 13
    state = runtime.new_state(1, capacity=64)
    state.prefill(prompt)
    state.keep_prefill_logits = True
    state.prefill(np.array([[7, 9, 500, 501]]))  # 9 kept, 500 and 501 rejected
    state.discard(2)
    growing = not runtime.shared_kv
    assert state.length == prompt.shape[1] + (4 if growing else 2)  # a growing cache masks, no copy
    got = [state.step(np.array([11])).copy()]
    state.prefill(np.array([[13, 600, 601]]))
    got.append(state.prefill_logits[:, 0])
    state.discard(2)
    np.testing.assert_allclose(got[0], expected[2], atol=1e-4)
    np.testing.assert_allclose(got[1], expected[3], atol=1e-4)
    np.testing.assert_allclose(state.step(np.array([5])), plain.step(np.array([5])), atol=1e-4)
