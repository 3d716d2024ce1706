"""RequestOptions: one typed options object per request, checked at the edge, compiled once."""

from __future__ import annotations

import dataclasses
import threading

import pytest

from inference4py import GenerationConfig, OnnxTextGenerator, RequestOptions
from inference4py.errors import ConfigurationError
from inference4py.generation.constraints import grammar as grammar_module
from inference4py.tasks.options import GENERATION_FIELDS, OUTPUT_FIELDS
from tests.conftest import MODELS

SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}


def test_every_generation_field_is_a_typed_field():
    declared = {f.name for f in dataclasses.fields(RequestOptions)}
    assert set(GENERATION_FIELDS) == {f.name for f in dataclasses.fields(GenerationConfig)}
    assert set(GENERATION_FIELDS) <= declared
    assert declared == {*GENERATION_FIELDS, *OUTPUT_FIELDS, "speculative", "reasoning", "chat_template_kwargs"}


def test_bad_values_and_unknown_names_are_refused_at_the_edge():
    with pytest.raises(ConfigurationError, match="temperature"):
        RequestOptions(temperature=-1)
    with pytest.raises(ConfigurationError, match="top_p"):
        RequestOptions(top_p=0)
    with pytest.raises(ConfigurationError, match="Unknown generation option.*max_new_token\\b"):
        RequestOptions.from_keywords({"max_new_token": 3})
    with pytest.raises(ConfigurationError, match="speculative"):
        RequestOptions(speculative="lookahead")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "options,sampling,temperature",
    [
        (RequestOptions(temperature=0), False, 1.0),  # 0 means greedy, the temperature is left alone
        (RequestOptions(temperature=0.7), True, 0.7),  # any other value samples at it
        (RequestOptions(temperature=0.7, do_sample=False), False, 0.7),  # both given: as given
        (RequestOptions(), False, 1.0),
    ],
)
def test_temperature_alone_decides_sampling(options, sampling, temperature):
    config = options.apply(GenerationConfig())
    assert config.sampling is sampling and config.temperature == temperature
    assert options.apply(GenerationConfig(do_sample=True)).sampling is (sampling or options.temperature is None)


@pytest.mark.parametrize(
    "options,greedy_model,sampling_model",
    [
        # a filter that filters turns sampling on (vLLM, llama.cpp: only temperature 0 is greedy)
        (RequestOptions(top_k=50), True, True),
        (RequestOptions(top_p=0.9), True, True),
        (RequestOptions(min_p=0.1), True, True),
        # a filter set to "off" changes nothing
        (RequestOptions(top_k=0), False, True),
        (RequestOptions(top_p=1.0, min_p=0.0), False, True),
        # temperature decides before the filters; do_sample before both
        (RequestOptions(top_k=50, temperature=0), False, False),
        (RequestOptions(top_p=0.9, temperature=0.5), True, True),
        (RequestOptions(top_k=50, do_sample=False), False, False),
        (RequestOptions(top_k=0, do_sample=True), True, True),
    ],
)
def test_one_sampling_rule(options, greedy_model, sampling_model):
    assert options.apply(GenerationConfig(do_sample=False)).sampling is greedy_model
    assert options.apply(GenerationConfig(do_sample=True)).sampling is sampling_model
    assert GenerationConfig().with_request(options.generation_changes()).sampling is greedy_model


def test_the_builder_decides_sampling_as_a_request_does():
    builder = OnnxTextGenerator.builder().top_k(40)
    assert builder.generation_overrides() == {"top_k": 40}  # the setter records the value only
    assert OnnxTextGenerator.builder().greedy().top_p(0.5).generation_overrides() == {"do_sample": False, "top_p": 0.5}


def test_keywords_and_their_aliases():
    options = RequestOptions.from_keywords({"stop": "END", "max_new_tokens": None, "speculative": None})
    assert options.stop_sequences == ("END",) and options.max_new_tokens is None
    assert options.speculation(default=object()) is None  # speculative=None turns the builder's off  # type: ignore[arg-type]
    assert RequestOptions.from_keywords({"stop_sequence": ["a", "b"]}).stop_sequences == ("a", "b")


@pytest.mark.parametrize(
    "output",
    [
        {"response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": SCHEMA}}},
        {"json_schema": SCHEMA},
        {"regex": "[0-9]{3}"},
    ],
)
def test_a_constraint_is_compiled_once_per_request(monkeypatch, output):
    """The grammar is compiled when the request is prepared, never again for the mask (issue 31)."""
    pytest.importorskip("llguidance")
    real = grammar_module.compile_grammar
    calls: list[str] = []
    lock = threading.Lock()

    def counting(**kinds):
        with lock:
            calls.append(next(iter(k for k, v in kinds.items() if v)))
        return real(**kinds)

    monkeypatch.setattr(grammar_module, "compile_grammar", counting)
    import inference4py.generation.constraints as constraints_package
    import inference4py.generation.constraints.processor as processor_module

    monkeypatch.setattr(constraints_package, "compile_grammar", counting)
    monkeypatch.setattr(processor_module, "compile_grammar", counting)
    with OnnxTextGenerator.builder().model_path(MODELS / "qwen2").build() as gen:
        gen.generate("Give a number:", max_new_tokens=8, **output)
        assert len(calls) == 1
        with gen.batched() as batched:
            batched.generate("Give a number:", max_new_tokens=8, **output)
        assert len(calls) == 2
        gen.generate_batch(["a", "b", "c"], max_new_tokens=4, **output)
        assert len(calls) == 5  # one per request of the batch


def test_two_constraints_are_refused_once_with_the_fix():
    pytest.importorskip("llguidance")
    with (
        OnnxTextGenerator.builder().model_path(MODELS / "qwen2").build() as gen,
        pytest.raises(ConfigurationError, match="Only one output constraint at a time.*regex"),
    ):
        gen.generate("x", max_new_tokens=2, json_schema=SCHEMA, regex="[0-9]")


def test_paths_without_output_control_refuse_it_instead_of_ignoring_it():
    with OnnxTextGenerator.builder().model_path(MODELS / "qwen2").build() as gen:
        for call in (
            lambda: gen.generator(json_schema=SCHEMA),
            lambda: gen.chat_session(regex="[0-9]").send("hi"),
            lambda: gen.call_settings(3, tools=[{"type": "function", "function": {"name": "f"}}]),
        ):
            with pytest.raises(ConfigurationError, match="does not constrain its output"):
                call()
