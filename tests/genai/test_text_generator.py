"""inference4py_genai.TextGenerator on the tiny genai fixtures, against transformers' ids.

The fixtures (models/genai-*) were built by onnxruntime-genai's model builder
from tiny random Llama / Qwen2 models; references/genai.json holds transformers'
greedy and beam-search ids for the fp32 folders and onnxruntime-genai's own
greedy ids for the int4 folder (tools/fixtures/genai.py).
"""

from __future__ import annotations

import shutil

import pytest

from tests.genai.conftest import folder, reference, require_genai

genai = require_genai()

from inference4py.errors import (  # noqa: E402
    ConfigurationError,
    GeneratorClosedError,
    InferenceError,
    InvalidInputError,
    ModelFilesMissingError,
    ModelLoadError,
    PromptTooLongError,
)
from inference4py.generation.result import GenerationResult  # noqa: E402
from inference4py_genai import TextGenerator, _base  # noqa: E402

FP32 = ("genai-llama", "genai-qwen2")
_generators: dict[str, TextGenerator] = {}


def generator(name: str) -> TextGenerator:
    if name not in _generators:
        _generators[name] = TextGenerator.builder().model_path(folder(name)).build()
    return _generators[name]


def _cases(names, kind):
    for name in names:
        for case in reference(name)["cases"]:
            if case["kind"] == kind:
                yield pytest.param(name, case, id=f"{name}-{case['name']}")


def _overrides(case: dict) -> dict:
    settings = {k: v for k, v in case["settings"].items() if k != "do_sample"}
    return {"max_new_tokens": case["max_new_tokens"], "do_sample": False, **settings}


# --------------------------------------------------------------------------- greedy = transformers


@pytest.mark.parametrize("name,case", list(_cases(FP32, "text")))
def test_greedy_text_prompt_matches_transformers(name, case):
    gen = generator(name)
    assert gen.encode_prompt(case["prompt"]) == case["prompt_ids"]
    result = gen.generate(case["prompt"], **_overrides(case))
    assert isinstance(result, GenerationResult)
    assert list(result.token_ids) == case["output_ids"]
    assert result.text == case["text"]
    assert result.prompt_tokens == len(case["prompt_ids"])
    assert result.generated_tokens == len(case["output_ids"])
    ended = case["output_ids"][-1] in gen.generation_config.eos_token_id
    assert result.finish_reason == ("eos" if ended else "length")


@pytest.mark.parametrize("name,case", list(_cases(FP32, "chat")))
def test_chat_messages_go_through_the_models_template(name, case):
    gen = generator(name)
    assert gen.encode_prompt(case["messages"]) == case["prompt_ids"]
    result = gen.generate(case["messages"], **_overrides(case))
    assert list(result.token_ids) == case["output_ids"]
    assert result.prompt_tokens == len(case["prompt_ids"])


@pytest.mark.parametrize("name,case", list(_cases(FP32, "beam")))
def test_beam_search_matches_transformers(name, case):
    result = generator(name).generate(case["prompt"], **_overrides(case))
    assert [list(c.token_ids) for c in result.candidates] == case["sequences"]
    assert [c.text for c in result.candidates] == case["texts"]
    assert list(result.token_ids) == case["sequences"][0]


@pytest.mark.parametrize(
    "name,case", list(_cases(["genai-llama-int4"], "text")) + list(_cases(["genai-llama-int4"], "chat"))
)
def test_int4_folder_reproduces_genai_references(name, case):
    prompt = case["prompt"] if case["kind"] == "text" else case["messages"]
    result = generator(name).generate(prompt, **_overrides(case))
    n = case["stable_prefix"]
    assert list(result.token_ids[:n]) == case["output_ids"][:n]


def test_chat_template_on_str_prompts_and_system_prompt():
    case = next(c for c in reference("genai-qwen2")["cases"] if c["name"] == "chat-system")
    system, user = case["messages"]
    gen = (
        TextGenerator.builder()
        .model_path(folder("genai-qwen2"))
        .chat_template()
        .system_prompt(system["content"])
        .build()
    )
    assert gen.encode_prompt(user["content"]) == case["prompt_ids"]
    assert list(gen.generate(user["content"], **_overrides(case)).token_ids) == case["output_ids"]


# --------------------------------------------------------------------------- native loop = genai loop


@pytest.mark.parametrize("name", ["genai-llama", "genai-qwen2", "genai-llama-int4"])
def test_native_loop_on_a_genai_folder_gives_the_same_ids(name):
    """inference4py's own loop reads genai folders too: same ids as genai's loop (the int4 folder included)."""
    from inference4py import OnnxTextGenerator

    native = OnnxTextGenerator.builder().model_path(folder(name)).build()
    gen = generator(name)
    for case in reference(name)["cases"]:
        if case["kind"] not in ("text", "chat") or set(case["settings"]) != {"do_sample"}:
            continue
        prompt = case["prompt"] if case["kind"] == "text" else case["messages"]
        ours = gen.generate(prompt, max_new_tokens=case["max_new_tokens"])
        theirs = native.generate(prompt, max_new_tokens=case["max_new_tokens"], do_sample=False)
        assert theirs.token_ids == ours.token_ids, case["name"]
        assert theirs.text == ours.text


# --------------------------------------------------------------------------- sampling really samples


def _first_tokens(gen, seeds, **options):
    return [gen.generate("The old house", max_new_tokens=1, seed=s, **options).token_ids[0] for s in seeds]


def test_sampling_with_a_seed_is_reproducible():
    gen = generator("genai-llama")
    a = gen.generate("The old house", max_new_tokens=16, do_sample=True, temperature=1.0, seed=7)
    b = gen.generate("The old house", max_new_tokens=16, do_sample=True, temperature=1.0, seed=7)
    c = gen.generate("The old house", max_new_tokens=16, do_sample=True, temperature=1.0, seed=8)
    assert a.token_ids == b.token_ids and a.text == b.text
    assert c.token_ids != a.token_ids


def test_builder_seed_and_temperature_turn_sampling_on():
    a = TextGenerator.builder().model_path(folder("genai-llama")).temperature(1.5).seed(3).build()
    greedy = generator("genai-llama").generate("The old house", max_new_tokens=16)
    sampled = a.generate("The old house", max_new_tokens=16)
    assert sampled.token_ids == a.generate("The old house", max_new_tokens=16).token_ids
    assert sampled.token_ids != greedy.token_ids


def test_temperature_changes_the_distribution():
    """Fails when do_sample is not passed to genai: every draw would then be the argmax."""
    gen = generator("genai-llama")
    greedy = gen.generate("The old house", max_new_tokens=1).token_ids[0]
    seeds = range(40)
    counts = {}
    for t in (0.01, 0.3, 1.0, 5.0):
        draws = _first_tokens(gen, seeds, temperature=t, top_k=0)
        counts[t] = (draws.count(greedy), len(set(draws)))
    assert counts[0.01] == (40, 1)  # (draws equal to the argmax, distinct tokens): nearly greedy
    assert counts[0.01][0] > counts[0.3][0] > counts[1.0][0] >= counts[5.0][0]  # hotter: less often the argmax
    assert counts[0.3][1] < counts[1.0][1] < counts[5.0][1]  # ... and more distinct tokens


def test_top_k_and_top_p_apply():
    gen = generator("genai-llama")
    greedy = gen.generate("The old house", max_new_tokens=8).token_ids
    seeds = range(12)
    assert all(
        gen.generate("The old house", max_new_tokens=8, temperature=5.0, top_k=1, seed=s).token_ids == greedy
        for s in seeds
    )
    assert all(
        gen.generate("The old house", max_new_tokens=8, temperature=5.0, top_k=0, top_p=1e-6, seed=s).token_ids
        == greedy
        for s in seeds
    )
    top3 = set(_first_tokens(gen, range(40), temperature=5.0, top_k=3))
    assert len(top3) == 3


def test_temperature_zero_means_greedy():
    gen = generator("genai-llama")
    greedy = gen.generate("The old house", max_new_tokens=8).token_ids
    assert gen.generate("The old house", max_new_tokens=8, temperature=0, seed=1).token_ids == greedy


def test_several_samples_are_candidates():
    result = generator("genai-llama").generate(
        "The old house", max_new_tokens=8, do_sample=True, num_return_sequences=3, seed=5
    )
    assert len(result.candidates) == 3
    assert len({c.token_ids for c in result.candidates}) > 1
    assert result.token_ids == result.candidates[0].token_ids


# --------------------------------------------------------------------------- max_new_tokens -> max_length


def test_max_new_tokens_becomes_genais_total_max_length(monkeypatch):
    seen = []
    original = _base.search_options

    def spy(config, prompt_len, **kw):
        options = original(config, prompt_len, **kw)
        seen.append(options)
        return options

    monkeypatch.setattr(_base, "search_options", spy)
    gen = generator("genai-llama")
    prompt_len = len(gen.encode_prompt("The old house"))
    result = gen.generate("The old house", max_new_tokens=5)
    assert seen[-1]["max_length"] == prompt_len + 5
    assert result.generated_tokens == 5 and result.finish_reason == "length"
    assert seen[-1]["do_sample"] is False  # always explicit: genai_config.json's own value never leaks in
    # No max_new_tokens anywhere: the library default (256), cut to the room left in the 128-token context.
    gen.generate("The old house")
    assert seen[-1]["max_length"] == 128
    small = TextGenerator.builder().model_path(folder("genai-llama")).max_new_tokens(7).build()
    small.generate("The old house")
    assert seen[-1]["max_length"] == prompt_len + 7


def test_search_options_mapping():
    from inference4py.generation.config import GenerationConfig

    greedy = _base.search_options(GenerationConfig(max_new_tokens=10, min_new_tokens=2), 4)
    assert greedy["max_length"] == 14 and greedy["min_length"] == 6 and greedy["do_sample"] is False
    assert "temperature" not in greedy and "random_seed" not in greedy
    sampled = _base.search_options(GenerationConfig(do_sample=True, temperature=0.7, top_k=20, top_p=0.9, seed=3), 4)
    assert sampled["do_sample"] is True
    assert (sampled["temperature"], sampled["top_k"], sampled["top_p"], sampled["random_seed"]) == (0.7, 20, 0.9, 3)
    assert _base.search_options(GenerationConfig(do_sample=True), 4)["random_seed"] == -1


def test_min_new_tokens_applies():
    gen = generator("genai-qwen2")
    case = next(c for c in reference("genai-qwen2")["cases"] if c["name"] == "chat-multi-turn")
    assert case["output_ids"] == [1000]  # this chat ends at once: EOS first
    result = gen.generate(case["messages"], max_new_tokens=6, min_new_tokens=4)
    assert len(result.token_ids) >= 4 and result.token_ids[0] != 1000


# --------------------------------------------------------------------------- stop sequences, streaming


def test_stop_sequence_cuts_the_text_and_the_stream():
    case = next(c for c in reference("genai-llama")["cases"] if c["name"] == "ascii")
    gen = generator("genai-llama")
    full = case["text"]
    stop = full[len(full) // 2 : len(full) // 2 + 3]
    expected = full[: full.index(stop)]
    result = gen.generate(case["prompt"], max_new_tokens=case["max_new_tokens"], stop_sequences=[stop])
    assert result.text == expected and result.finish_reason == "stop"
    assert len(result.token_ids) < len(case["output_ids"])
    streamed = "".join(gen.stream(case["prompt"], max_new_tokens=case["max_new_tokens"], stop_sequences=[stop]))
    assert streamed == expected
    built = TextGenerator.builder().model_path(folder("genai-llama")).stop_sequence(stop).build()
    assert built.generate(case["prompt"], max_new_tokens=case["max_new_tokens"]).text == expected


@pytest.mark.parametrize("name,case", list(_cases(["genai-llama"], "text")))
def test_stream_pieces_join_to_the_generated_text(name, case):
    gen = generator(name)
    pieces = list(gen.stream(case["prompt"], **_overrides(case)))
    seen = []
    result = gen.generate(case["prompt"], on_token=seen.append, **_overrides(case))
    assert "".join(pieces) == result.text == "".join(seen) == case["text"]
    chunks = list(gen.stream_chunks(case["prompt"], **_overrides(case)))
    assert [c.token_id for c in chunks if c.token_id is not None] == case["output_ids"]
    assert chunks[-1].finish_reason in ("eos", "length")


def test_stream_refuses_beam_search():
    with pytest.raises(ConfigurationError, match="generate"):
        list(generator("genai-llama").stream("The old house", num_beams=3))


def test_result_reports_counts_and_speed():
    result = generator("genai-llama").generate("The old house", max_new_tokens=10)
    assert result.prompt_tokens == len(generator("genai-llama").encode_prompt("The old house"))
    assert result.generated_tokens == 10
    assert result.duration >= result.time_to_first_token > 0
    assert result.tokens_per_second > 0


# --------------------------------------------------------------------------- options genai cannot apply, errors


def test_min_p_is_refused():
    with pytest.raises(ConfigurationError, match="OnnxTextGenerator"):
        TextGenerator.builder().model_path(folder("genai-llama")).min_p(0.1)
    with pytest.raises(ConfigurationError, match="min_p"):
        generator("genai-llama").generate("The old house", max_new_tokens=2, min_p=0.1)


def _native_reference(name, prompt, **options):
    """What inference4py's own loop computes with the same processors: a bare greedy loop over genai's logits."""
    import numpy as np

    from inference4py.generation.processors import apply_processors, make_logits_processors
    from inference4py_genai._runtime import og

    gen = generator(name)
    ids = gen.encode_prompt(prompt)
    config = gen._planner.for_call(len(ids), options)
    procs = make_logits_processors(config, prompt_length=len(ids))
    params = og().GeneratorParams(gen._model)
    params.set_search_options(max_length=len(ids) + config.max_new_tokens, do_sample=False)
    g = og().Generator(gen._model, params)
    g.append_tokens(np.array(ids, dtype=np.int32))
    seq, out = list(ids), []
    while len(out) < config.max_new_tokens:
        scores = apply_processors(procs, np.array([seq]), np.array(g.get_logits()[:, -1, :], dtype=np.float32))
        token = int(np.argmax(scores[0]))
        out.append(token)
        seq.append(token)
        if token in config.eos_token_id:
            break
        g.append_tokens(np.array([token], dtype=np.int32))
    return out


@pytest.mark.parametrize(
    "options",
    [
        {"no_repeat_ngram_size": 1},
        {"suppress_tokens": [1077, 60]},
        {"begin_suppress_tokens": [1077]},
        {"bad_words_ids": [[1145, 1145], [994]]},
        {"forced_eos_token_id": 5},
        {"no_repeat_ngram_size": 1, "repetition_penalty": 1.3},
    ],
    ids=lambda o: "-".join(o),
)
def test_processors_genai_lacks_run_in_python(options):
    case = next(c for c in reference("genai-llama")["cases"] if c["name"] == "ascii")
    plain = generator("genai-llama").generate(case["prompt"], max_new_tokens=16)
    result = generator("genai-llama").generate(case["prompt"], max_new_tokens=16, **options)
    assert list(result.token_ids) == _native_reference("genai-llama", case["prompt"], max_new_tokens=16, **options)
    assert result.token_ids != plain.token_ids  # the processor had work to do
    streamed = list(generator("genai-llama").stream_chunks(case["prompt"], max_new_tokens=16, **options))
    assert [c.token_id for c in streamed if c.token_id is not None] == list(result.token_ids)


def test_no_repeat_ngram_matches_transformers_where_it_changes_the_output():
    gen = generator("genai-llama")
    ids = gen.generate("The old house", max_new_tokens=24, no_repeat_ngram_size=2).token_ids
    pairs = [tuple(ids[i : i + 2]) for i in range(len(ids) - 1)]
    full = gen.encode_prompt("The old house") + list(ids)
    all_pairs = [tuple(full[i : i + 2]) for i in range(len(full) - 1)]
    assert len(all_pairs) == len(set(all_pairs)) and pairs


def test_builder_logits_processor_runs_on_genais_logits():
    import numpy as np

    def ban_first(ids, scores):
        scores[:, 1077] = -np.inf
        return scores

    seen = []

    def record(ids, scores):
        seen.append(ids.shape[1])
        return scores

    gen = (
        TextGenerator.builder()
        .model_path(folder("genai-llama"))
        .logits_processor(ban_first)
        .logits_processor(record)
        .build()
    )
    case = next(c for c in reference("genai-llama")["cases"] if c["name"] == "ascii")
    assert case["output_ids"][0] == 1077
    result = gen.generate(case["prompt"], max_new_tokens=5)
    assert 1077 not in result.token_ids
    n = len(case["prompt_ids"])
    assert seen == [n, n + 1, n + 2, n + 3, n + 4]  # the whole sequence so far, every step


def test_beam_search_with_python_processors_is_refused():
    with pytest.raises(ConfigurationError, match="Beam search"):
        generator("genai-llama").generate("The old house", num_beams=2, no_repeat_ngram_size=2)


def test_user_eos_adds_to_the_models_eos():
    case = next(c for c in reference("genai-llama")["cases"] if c["name"] == "ascii")
    gen = generator("genai-llama")
    stop_id = case["output_ids"][4]
    result = gen.generate(case["prompt"], max_new_tokens=case["max_new_tokens"], eos_token_id=[stop_id])
    assert list(result.token_ids) == case["output_ids"][:5] and result.finish_reason == "eos"
    assert gen.generate(case["prompt"], max_new_tokens=5, eos_token_id=[stop_id]).finish_reason == "eos"
    # min_new_tokens must also hold back the extra end token: that runs in Python.
    held = gen.generate(case["prompt"], max_new_tokens=10, eos_token_id=[stop_id], min_new_tokens=8)
    assert stop_id not in held.token_ids[:8] and len(held.token_ids) >= 8


def test_prompt_errors():
    gen = generator("genai-llama")
    with pytest.raises(InvalidInputError, match="empty"):
        gen.generate("")
    with pytest.raises(InvalidInputError, match="vocabulary"):
        gen.generate([1, 99999])
    with pytest.raises(PromptTooLongError, match="context"):
        gen.generate("The old house", max_new_tokens=200)
    with pytest.raises(PromptTooLongError):
        gen.generate([5] * 130)


def test_closed_generator_refuses_work():
    gen = TextGenerator.builder().model_path(folder("genai-llama")).build()
    with gen:
        gen.generate("hi", max_new_tokens=1)
    with pytest.raises(GeneratorClosedError):
        gen.generate("hi")


def test_folder_without_genai_config(tmp_path):
    with pytest.raises(ModelFilesMissingError, match="genai_config.json"):
        TextGenerator.builder().model_path(folder("llama")).build()


def test_genai_load_errors_are_wrapped(tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(folder("genai-llama"), broken)
    (broken / "model.onnx").write_bytes(b"not an onnx file")
    with pytest.raises(ModelLoadError, match="onnxruntime-genai") as info:
        TextGenerator.builder().model_path(broken).build()
    assert info.value.__cause__ is not None


def test_genai_runtime_errors_are_wrapped():
    model = generator("genai-llama")._model

    def feed(generator):
        generator.append_tokens(__import__("numpy").array([5000], dtype="int32"))  # past the vocabulary

    with pytest.raises(InferenceError, match="onnxruntime-genai failed while reading the prompt") as info:
        next(_base.og_tokens(model, {"max_length": 8}, feed))
    assert isinstance(info.value.__cause__, RuntimeError)


# --------------------------------------------------------------------------- providers, threads


def test_providers_and_threads():
    expected = generator("genai-llama").generate("The old house", max_new_tokens=8).token_ids
    cpu = (
        TextGenerator.builder()
        .model_path(folder("genai-llama"))
        .providers(["CPUExecutionProvider"])
        .intra_op_threads(1)
        .build()
    )
    assert cpu.generate("The old house", max_new_tokens=8).token_ids == expected
    with pytest.raises(ConfigurationError, match="bogus"):
        TextGenerator.builder().model_path(folder("genai-llama")).providers(["bogus"]).build()
    with pytest.raises(ConfigurationError):
        TextGenerator.builder().providers([])
    with pytest.raises(ConfigurationError):
        TextGenerator.builder().intra_op_threads(-1)


def test_providers_go_through_clear_and_append(monkeypatch):
    from inference4py_genai import _runtime

    calls = []
    real = _runtime.og()

    class SpyConfig:
        def __init__(self, path):
            self._real = real.Config(path)

        def clear_providers(self):
            calls.append("clear")
            self._real.clear_providers()

        def append_provider(self, name):
            calls.append(name)

        def overlay(self, text):
            self._real.overlay(text)

    class Spy:
        Config = SpyConfig

        @staticmethod
        def Model(config):  # mirrors og.Model
            return real.Model(config._real)

    monkeypatch.setattr(_runtime, "og", lambda: Spy)
    TextGenerator.builder().model_path(folder("genai-llama")).providers(["CUDAExecutionProvider", "DML", "cpu"]).build()
    assert calls == ["clear", "cuda", "DML"]


def test_environment_providers_are_used(monkeypatch):
    monkeypatch.setenv("INFERENCE4PY_PROVIDERS", "bogus")
    with pytest.raises(ConfigurationError, match="bogus"):
        TextGenerator.builder().model_path(folder("genai-llama")).build()


# --------------------------------------------------------------------------- presets and the hub


def test_presets_point_at_inference4j_repos():
    assert TextGenerator.phi3Mini()._model_id == "inference4j/phi-3-mini-4k-instruct"
    assert TextGenerator.deepSeekR1_1_5B()._model_id == "inference4j/deepseek-r1-distill-qwen-1.5b"
    assert "phi3Mini" in repr(TextGenerator.phi3Mini().max_new_tokens(5))


def test_preset_downloads_through_inference4py_hub():
    import os
    from pathlib import Path

    from tests.hubserver import populate_cache

    src = folder("genai-llama")
    files = {p.name: p for p in src.iterdir() if p.is_file()}
    snapshot = populate_cache(Path(os.environ["HF_HUB_CACHE"]), "inference4j/phi-3-mini-4k-instruct", files)
    with TextGenerator.phi3Mini().max_new_tokens(4).build() as gen:
        assert gen.folder == snapshot
        # The folder's own template (Zephyr) wins over the preset's Phi-3 fallback.
        case = next(c for c in reference("genai-llama")["cases"] if c["name"] == "chat-single")
        assert gen.encode_prompt(case["messages"][0]["content"]) == case["prompt_ids"]
        assert gen.generate(case["messages"][0]["content"]).generated_tokens == 4


# --------------------------------------------------------------------------- options= as inference4py's classes take it


@pytest.mark.parametrize("name,case", list(_cases(FP32, "text"))[:2])
def test_typed_options_give_the_same_tokens_as_keywords(name, case):
    from inference4py import RequestOptions

    gen = generator(name)
    keywords = gen.generate(case["prompt"], **_overrides(case))
    typed = gen.generate(case["prompt"], options=RequestOptions(**_overrides(case)))
    assert typed.token_ids == keywords.token_ids == tuple(case["output_ids"])
    streamed = list(gen.stream_chunks(case["prompt"], options=RequestOptions(**_overrides(case))))
    assert tuple(c.token_id for c in streamed if c.token_id is not None) == keywords.token_ids
    assert "".join(gen.stream(case["prompt"], options=RequestOptions(**_overrides(case)))) == keywords.text


def test_keywords_beside_options_replace_its_fields_as_of_call_does():
    from inference4py import RequestOptions

    gen = generator("genai-llama")
    sampled = RequestOptions(max_new_tokens=12, do_sample=True, temperature=1.0, seed=7)
    both = gen.generate("The old house", options=sampled, max_new_tokens=5, seed=8)
    alone = gen.generate("The old house", max_new_tokens=5, do_sample=True, temperature=1.0, seed=8)
    assert both.token_ids == alone.token_ids and len(both.token_ids) == 5
    with pytest.raises(ConfigurationError, match="options takes a RequestOptions"):
        gen.generate("The old house", options={"max_new_tokens": 5})
    with pytest.raises(ConfigurationError, match="speculative"):
        gen.generate("The old house", options=RequestOptions(speculative="prompt_lookup"))


def test_the_facade_takes_options_where_inference4pys_does():
    import inspect

    from inference4py import OnnxTextGenerator

    for method in ("generate", "stream", "stream_chunks"):
        ours = inspect.signature(getattr(TextGenerator, method)).parameters
        native = inspect.signature(getattr(OnnxTextGenerator, method)).parameters
        assert list(ours) == list(native), method
        assert ours["options"].kind is inspect.Parameter.KEYWORD_ONLY and ours["options"].default is None
