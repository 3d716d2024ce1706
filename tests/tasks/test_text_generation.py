"""OnnxTextGenerator end to end on the tiny fixtures, against transformers' generate() ids."""

from __future__ import annotations

import threading

import pytest

from inference4py import OnnxTextGenerator
from inference4py.errors import ConfigurationError, InvalidInputError, PromptTooLongError
from tests.conftest import FIXTURES, load_reference

REF = load_reference("decoder")["models"]

_generators: dict[str, OnnxTextGenerator] = {}


def generator(name: str) -> OnnxTextGenerator:
    if name not in _generators:
        _generators[name] = OnnxTextGenerator.builder().model_path(FIXTURES / REF[name]["folder"]).build()
    return _generators[name]


def _cases(kind: str):
    for name, model in REF.items():
        for case in model["cases"]:
            if case["kind"] == kind:
                yield pytest.param(name, case, id=f"{name}-{case['name']}")


def _overrides(case: dict) -> dict:
    settings = {k: v for k, v in case.get("settings", {}).items() if k != "do_sample"}
    if "eos_token_id" in settings:
        settings["eos_token_id"] = (settings["eos_token_id"],)
    return {"max_new_tokens": case["max_new_tokens"], "do_sample": False, **settings}


def _check_ids(name: str, case: dict, got: tuple[int, ...]) -> None:
    expected = case["output_ids"]
    if "stable_prefix" in case and not case.get("matches_fp32", True):
        n = case["stable_prefix"]
        assert list(got[:n]) == expected[:n]
    else:
        assert list(got) == expected


@pytest.mark.parametrize("name,case", list(_cases("text")))
def test_greedy_text_prompt_matches_transformers(name, case):
    gen = generator(name)
    if case["prompt"] == "":
        # transformers generates from BOS alone; we refuse an empty prompt (the ids path covers BOS-only).
        with pytest.raises(InvalidInputError, match="empty"):
            gen.generate("", **_overrides(case))
        return
    assert gen.encode_prompt(case["prompt"]) == case["prompt_ids"]
    result = gen.generate(case["prompt"], **_overrides(case))
    _check_ids(name, case, result.token_ids)
    assert result.prompt_tokens == len(case["prompt_ids"])
    assert result.generated_tokens == len(result.token_ids)
    hit_eos = result.token_ids[-1] in gen.generation_config.eos_token_id or (
        "eos_token_id" in case.get("settings", {}) and result.token_ids[-1] == case["settings"]["eos_token_id"]
    )
    assert result.finish_reason == (
        "eos" if hit_eos and len(result.token_ids) < case["max_new_tokens"] or hit_eos else "length"
    )


@pytest.mark.parametrize("name,case", list(_cases("text")))
def test_greedy_token_id_prompt_matches_transformers(name, case):
    result = generator(name).generate(list(case["prompt_ids"]), **_overrides(case))
    _check_ids(name, case, result.token_ids)


@pytest.mark.parametrize("name,case", list(_cases("chat")))
def test_chat_messages_match_transformers_template_and_ids(name, case):
    gen = generator(name)
    assert gen.encode_prompt(case["messages"]) == case["prompt_ids"]
    result = gen.generate(case["messages"], **_overrides(case))
    _check_ids(name, case, result.token_ids)


@pytest.mark.parametrize("name,case", [c for c in _cases("text") if c.values[1]["prompt"]][:14])
def test_stream_and_on_token_concatenate_to_result_text(name, case):
    gen = generator(name)
    pieces: list[str] = []
    result = gen.generate(case["prompt"], on_token=pieces.append, **_overrides(case))
    streamed = list(gen.stream(case["prompt"], **_overrides(case)))
    assert "".join(pieces) == result.text == "".join(streamed)
    assert result.text == gen.tokenizer.decode(list(result.token_ids))


def test_stop_sequence_is_cut_and_never_streamed():
    gen = generator("gpt2")
    case = REF["gpt2"]["cases"][0]
    full = gen.generate(case["prompt"], max_new_tokens=24)
    # A stop string that straddles token boundaries somewhere in the middle of the output.
    stop = full.text[5:12]
    assert stop and stop in full.text
    pieces: list[str] = []
    result = gen.generate(case["prompt"], on_token=pieces.append, max_new_tokens=24, stop_sequences=(stop,))
    assert result.finish_reason == "stop"
    assert stop not in result.text
    assert result.text == full.text[: full.text.index(stop)]
    assert "".join(pieces) == result.text
    assert result.generated_tokens < 24
    assert result.stop_sequence == stop and full.stop_sequence is None
    # of two stop strings, the one that ended the text is named
    later = full.text[14:18]
    assert full.text.index(stop) < full.text.index(later)
    chunks = list(gen.stream_chunks(case["prompt"], max_new_tokens=24, stop_sequences=(later, stop)))
    assert chunks[-1].finish_reason == "stop" and chunks[-1].stop_sequence == stop


def test_builder_stop_sequence_option():
    case = REF["llama"]["cases"][0]
    folder = FIXTURES / REF["llama"]["folder"]
    full = generator("llama").generate(case["prompt"], max_new_tokens=20)
    stop = full.text[3:9]
    with OnnxTextGenerator.builder().model_path(folder).max_new_tokens(20).stop_sequence(stop).build() as gen:
        result = gen.generate(case["prompt"])
    assert result.finish_reason == "stop" and result.text == full.text[: full.text.index(stop)]


def test_same_seed_same_sample_and_different_seeds_differ():
    gen = generator("qwen2")
    a = gen.generate("The old house", max_new_tokens=20, do_sample=True, temperature=1.0, seed=7)
    b = gen.generate("The old house", max_new_tokens=20, do_sample=True, temperature=1.0, seed=7)
    c = gen.generate("The old house", max_new_tokens=20, do_sample=True, temperature=1.0, seed=8)
    assert a.token_ids == b.token_ids
    assert a.token_ids != c.token_ids


def test_temperature_zero_means_greedy():
    gen = generator("gpt2")
    case = REF["gpt2"]["cases"][0]
    result = gen.generate(case["prompt"], max_new_tokens=case["max_new_tokens"], temperature=0.0, seed=3)
    assert list(result.token_ids) == case["output_ids"]


def test_result_fields_and_timings():
    result = generator("llama").generate("Hello there", max_new_tokens=10)
    assert result.generated_tokens == len(result.token_ids) <= 10
    assert result.duration >= result.time_to_first_token > 0
    assert result.tokens_per_second > 0
    assert result.candidates[0].token_ids == result.token_ids


def test_threads_do_not_corrupt_each_other():
    gen = generator("qwen2")
    cases = [c for c in REF["qwen2"]["cases"] if c["kind"] == "text"][:4]
    expected = {c["name"]: c["output_ids"] for c in cases}
    got: dict[str, list[int]] = {}
    errors: list[BaseException] = []

    def run(case):
        try:
            for _ in range(3):
                r = gen.generate(case["prompt"], **_overrides(case))
                assert list(r.token_ids) == expected[case["name"]]
            got[case["name"]] = list(r.token_ids)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(c,)) for c in cases]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert got == expected


def test_layouts_onnx_subfolder_and_inference4j(tmp_path):
    import shutil

    src = FIXTURES / REF["qwen2"]["folder"]
    dst = tmp_path / "qwen2-js"
    (dst / "onnx").mkdir(parents=True)
    for f in src.iterdir():
        if f.suffix == ".onnx":
            shutil.copy(f, dst / "onnx" / f.name)
        else:
            shutil.copy(f, dst / f.name)
    case = REF["qwen2"]["cases"][0]
    with OnnxTextGenerator.builder().model_path(dst).build() as gen:
        assert list(gen.generate(case["prompt"], **_overrides(case)).token_ids) == case["output_ids"]
    inf4j = FIXTURES / REF["gpt2-inference4j"]["folder"]
    assert not (inf4j / "tokenizer.json").exists()


# --------------------------------------------------------------------------- bad input


def test_empty_prompt_is_rejected_with_a_fix():
    with pytest.raises(InvalidInputError, match="empty"):
        generator("gpt2").generate("")
    with pytest.raises(InvalidInputError, match="empty"):
        generator("gpt2").generate([])


def test_prompt_longer_than_context():
    gen = generator("gpt2")
    context = gen._runtime.max_positions
    long_ids = [272] * (context - 5)
    with pytest.raises(PromptTooLongError, match="max_new_tokens"):
        gen.generate(long_ids, max_new_tokens=20)
    with pytest.raises(PromptTooLongError, match="Shorten"):
        gen.generate([272] * (context + 3), max_new_tokens=1)
    # Without an explicit max_new_tokens the limit shrinks to fit the context.
    result = gen.generate(long_ids)
    assert result.generated_tokens <= 5


def test_a_text_that_cannot_fit_is_refused_before_it_is_tokenized(monkeypatch):
    """A multi-megabyte prompt is refused by counting its characters, not by tokenizing it (seconds of
    CPU): a token holds at most tokenizer.max_token_chars characters."""
    gen = generator("gpt2")
    context, most = gen._runtime.max_positions, gen.tokenizer.max_token_chars
    too_long = "x" * (context * most + 1)
    fits_by_count = "x y " * (context * most // 4)  # whitespace is not counted: it goes to the tokenizer
    calls = []
    real = gen.tokenizer.encode
    monkeypatch.setattr(gen.tokenizer, "encode", lambda *a, **k: calls.append(1) or real(*a, **k))
    for prompt in (too_long, [{"role": "user", "content": too_long}]):
        if isinstance(prompt, list) and not gen.tokenizer.chat_template:
            continue
        with pytest.raises(PromptTooLongError, match="characters"):
            gen.generate(prompt, max_new_tokens=1)
    assert calls == []
    with pytest.raises(PromptTooLongError, match="tokens"):
        gen.generate(fits_by_count, max_new_tokens=1)
    assert calls == [1]


def test_call_settings_plan_a_call_before_any_model_work():
    gen = generator("gpt2")
    context = gen._runtime.max_positions
    assert gen.call_settings(context - 5).max_new_tokens == 5  # what is left of the context
    assert gen.call_settings(10, max_new_tokens=7, temperature=0.5).do_sample
    with pytest.raises(PromptTooLongError, match="max_new_tokens"):
        gen.call_settings(context - 5, max_new_tokens=20)
    with pytest.raises(ConfigurationError, match="Unknown generation option"):
        gen.call_settings(10, max_new_token=3)


def test_out_of_vocabulary_ids_are_rejected():
    with pytest.raises(InvalidInputError, match="vocabulary"):
        generator("gpt2").generate([1, 2, 10**6])
