"""Version 2 of the pipeline description: dataflow between sessions, inputs_embeds decoders,
init sessions with ``loop``, the final phase, per-session execution providers, and the
load-time errors of the proposal's table (seeds/002 §7.4) with their messages."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from inference4py import OnnxTextGenerator
from inference4py.engine.pipeline import DESCRIPTION_FILE, load_pipeline, schema_path
from inference4py.errors import InvalidInputError, PipelineSpecError
from inference4py.generation.config import GenerationConfig
from tests.conftest import MODELS, load_reference

SPLIT = MODELS / "llama-embeds"
FINAL = MODELS / "llama-final"


def _generator(folder: Path) -> OnnxTextGenerator:
    return OnnxTextGenerator.builder().model_path(folder).build()


@pytest.fixture(scope="module")
def split() -> OnnxTextGenerator:
    return _generator(SPLIT)


@pytest.fixture(scope="module")
def whole() -> OnnxTextGenerator:
    return _generator(MODELS / "llama")


def _overrides(case: dict) -> dict:
    settings = {k: v for k, v in case.get("settings", {}).items() if k != "do_sample"}
    return {"max_new_tokens": case.get("max_new_tokens", settings.pop("max_new_tokens", 16)), **settings}


# --------------------------------------------------------------------------- must show 2: a split decoder


def test_the_split_folder_is_an_embedding_step_session_wired_into_an_inputs_embeds_decoder():
    spec = load_pipeline(SPLIT)
    assert spec.source == DESCRIPTION_FILE
    assert spec.roles == {"decoder": "decoder"}  # the embedding session feeds it: no role of its own
    assert spec.step_feeders == ("embedding",)
    assert [w.to_json() for w in spec.dataflow] == [{"from": "embedding.inputs_embeds", "to": "decoder.inputs_embeds"}]
    described = spec.describe()
    assert described["version"] == 2 and described["pipeline"]["dataflow"] == [w.to_json() for w in spec.dataflow]


@pytest.mark.parametrize(
    "case", [c for c in load_reference("decoder")["models"]["llama"]["cases"] if c["kind"] == "text"][:6]
)
def test_greedy_on_the_split_decoder_gives_the_unsplit_ids(split, whole, case):
    settings = {"max_new_tokens": case["max_new_tokens"], "do_sample": False}
    got = split.generate(case["prompt_ids"], **settings).token_ids
    assert got == whole.generate(case["prompt_ids"], **settings).token_ids
    assert list(got) == case["output_ids"]  # transformers' generate() on the unsplit weights


@pytest.mark.parametrize("case", load_reference("beam")["models"]["llama"]["cases"][:3])
def test_beam_search_on_the_split_decoder_gives_the_unsplit_sequences(split, whole, case):
    settings = {**case["settings"], "do_sample": False}
    got = split.generate(case["prompt_ids"], **settings)
    want = whole.generate(case["prompt_ids"], **settings)
    assert [c.token_ids for c in got.candidates] == [c.token_ids for c in want.candidates]
    assert [list(c.token_ids) for c in got.candidates] == case["output_ids"]


def test_padded_batches_sampling_and_streaming_run_on_the_split_decoder(split, whole):
    prompts = ["Hello", "The old house stood at the end of the road"]
    batch = [r.token_ids for r in split.generate_batch(prompts, max_new_tokens=10, do_sample=False)]
    assert batch == [r.token_ids for r in whole.generate_batch(prompts, max_new_tokens=10, do_sample=False)]
    sampled = split.generate("Hello", max_new_tokens=12, do_sample=True, seed=3, temperature=0.9)
    assert (
        sampled.token_ids
        == whole.generate("Hello", max_new_tokens=12, do_sample=True, seed=3, temperature=0.9).token_ids
    )
    pieces = list(split.stream("Hello", max_new_tokens=10, do_sample=False))
    assert "".join(pieces) == whole.generate("Hello", max_new_tokens=10, do_sample=False).text


def test_continuous_batching_and_speculative_decoding_run_on_the_split_decoder(split, whole):
    prompt = "The old house stood at the end of the road"
    want = whole.generate(prompt, max_new_tokens=12, do_sample=False).token_ids
    with split.batched() as batched:
        assert batched.generate(prompt, max_new_tokens=12, do_sample=False).token_ids == want
    assert split.generate(prompt, max_new_tokens=12, do_sample=False, speculative="prompt_lookup").token_ids == want


def test_the_embedding_session_runs_on_each_new_token(split, monkeypatch):
    flow = split._runtime.flow
    assert flow is not None and flow.feeders == ("embedding",)
    seen: list[tuple[int, ...]] = []
    run = flow._run

    def spy(name, feeds):
        if name == "embedding":
            seen.append(tuple(np.asarray(feeds["input_ids"]).shape))
        return run(name, feeds)

    monkeypatch.setattr(flow, "_run", spy)
    result = split.generate([1, 280, 499, 511], max_new_tokens=5, do_sample=False)
    assert seen[0] == (1, 4)  # the prompt at once
    assert seen[1:] == [(1, 1)] * (result.generated_tokens - 1)  # then one token per step


# --------------------------------------------------------------------------- must show 3: the final phase


def _final_table() -> np.ndarray:
    model = onnx.load(str(FINAL / "final.onnx"))
    return numpy_helper.to_array(next(t for t in model.graph.initializer if t.name == "table"))


@pytest.mark.parametrize("settings", [{"do_sample": False}, {"do_sample": False, "num_beams": 3}])
def test_final_sessions_run_after_generation_and_their_outputs_are_on_the_result(settings):
    with _generator(FINAL) as gen:
        prompt = gen.encode_prompt("The old house")
        result = gen.generate("The old house", max_new_tokens=7, **settings)
    assert result.final_outputs is not None
    assert set(result.final_outputs) == {"summary.generated_sum", "summary.sequence_length"}
    ids = np.asarray(result.token_ids)
    np.testing.assert_allclose(
        result.final_outputs["summary.generated_sum"], _final_table()[ids].sum(axis=0)[None], rtol=1e-6
    )
    assert result.final_outputs["summary.sequence_length"].tolist() == [len(prompt) + len(ids)]


def test_a_pipeline_without_final_sessions_has_no_final_outputs(whole):
    assert whole.generate("Hello", max_new_tokens=2).final_outputs is None


def test_the_paths_that_do_not_run_final_sessions_refuse_them():
    from inference4py.errors import ConfigurationError

    with _generator(FINAL) as gen:
        with pytest.raises(ConfigurationError, match=r"generate_batch does not run the pipeline's final session"):
            gen.generate_batch(["Hello", "World"], max_new_tokens=4)
        with pytest.raises(ConfigurationError, match=r"batched\(\) .* final session"):
            gen.batched()
        with pytest.raises(ConfigurationError, match=r"speculative decoding does not run .* final session"):
            gen.generate("Hello Hello Hello", max_new_tokens=4, speculative="prompt_lookup")
        assert gen.generate("Hello", max_new_tokens=4).final_outputs is not None  # the plain path still runs them


def test_final_outputs_can_be_read_from_a_stream_of_chunks():
    from inference4py.generation.generate import collect

    with _generator(FINAL) as gen:
        chunks = gen.stream_chunks("Hello", max_new_tokens=4, do_sample=False)
        result = collect(chunks, prompt_tokens=0, started=0.0)
    assert result.final_outputs is not None
    np.testing.assert_allclose(
        result.final_outputs["summary.generated_sum"][0], _final_table()[list(result.token_ids)].sum(axis=0), rtol=1e-6
    )


# --------------------------------------------------------------------------- init sessions: loop, caller inputs


def _toy_vision(folder: Path, hidden: int = 32) -> np.ndarray:
    """vision.onnx: pixel_values [n, 6] -> image_features [n, hidden] (a MatMul); returns the weight."""
    weight = np.random.default_rng(1).standard_normal((6, hidden)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["pixel_values", "w"], ["image_features"])],
        "vision",
        [helper.make_tensor_value_info("pixel_values", TensorProto.FLOAT, ["images", 6])],
        [helper.make_tensor_value_info("image_features", TensorProto.FLOAT, ["images", hidden])],
        initializer=[numpy_helper.from_array(weight, "w")],
    )
    onnx.save(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=9), str(folder / "vision.onnx")
    )
    return weight


def _toy_embedding(folder: Path) -> None:
    """embedding.onnx: the split fixture's table, plus the sum of image_features added to every position."""
    source = onnx.load(str(SPLIT / "embedding.onnx"))
    table = source.graph.initializer[0]
    hidden = numpy_helper.to_array(table).shape[1]
    graph = helper.make_graph(
        [
            helper.make_node("Gather", [table.name, "input_ids"], ["tokens"]),
            helper.make_node("ReduceSum", ["image_features", "axis0"], ["pooled"], keepdims=0),  # [hidden]
            helper.make_node("Add", ["tokens", "pooled"], ["inputs_embeds"]),
        ],
        "embedding",
        [
            helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch_size", "sequence_length"]),
            helper.make_tensor_value_info("image_features", TensorProto.FLOAT, ["image_tokens", hidden]),
        ],
        [helper.make_tensor_value_info("inputs_embeds", TensorProto.FLOAT, ["batch_size", "sequence_length", hidden])],
        initializer=[table, numpy_helper.from_array(np.array([0], dtype=np.int64), "axis0")],
    )
    onnx.save(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=9),
        str(folder / "embedding.onnx"),
    )


def _vision_folder(tmp_path: Path, loop: str) -> tuple[Path, np.ndarray]:
    folder = tmp_path / "toy-vlm"
    shutil.copytree(SPLIT, folder)
    weight = _toy_vision(folder)
    _toy_embedding(folder)
    description = json.loads((SPLIT / DESCRIPTION_FILE).read_text(encoding="utf-8"))
    pipeline = description["pipeline"]
    pipeline["sessions"]["vision"] = {"file": "vision.onnx"}
    pipeline["flow"].insert(0, {"run": "vision", "when": "init", "loop": loop})
    pipeline["dataflow"].insert(0, {"from": "vision.image_features", "to": "embedding.image_features"})
    (folder / DESCRIPTION_FILE).write_text(json.dumps(description), encoding="utf-8")
    return folder, weight


@pytest.mark.parametrize("loop", ["batched", "per_image"])
def test_init_sessions_take_the_callers_inputs_and_feed_the_embedding_at_prefill(tmp_path, loop, whole):
    folder, weight = _vision_folder(tmp_path, loop)
    spec = load_pipeline(folder)
    assert spec.roles == {"decoder": "decoder"}  # a wired init session is no encoder
    assert spec.steps[0].loop == loop
    with _generator(folder) as gen:
        runtime = gen._runtime
        assert runtime.flow is not None and runtime.flow.caller_inputs == ("vision.pixel_values",)
        pixels = np.random.default_rng(2).standard_normal((3, 6)).astype(np.float32)
        values = runtime.flow.run_init({"vision.pixel_values": pixels})
        np.testing.assert_allclose(values["vision.image_features"], pixels @ weight, rtol=1e-5, atol=1e-5)

        prompt = np.array([[1, 280, 499, 511]])
        # no image: the vision session is skipped, the embedding gets an empty image_features -> the plain model
        state = runtime.new_state(1)
        plain = whole._runtime.new_state(1).prefill(prompt)
        np.testing.assert_allclose(state.prefill(prompt), plain, rtol=1e-4, atol=1e-4)
        # with images: the prompt's embeddings move by the pooled features, the next steps see no image
        state = runtime.new_state(1)
        state.set_inputs({"vision.pixel_values": pixels})
        with_image = state.prefill(prompt)
        assert not np.allclose(with_image, plain, atol=1e-3)
        step_flow = runtime.flow.decoder_inputs(np.array([[5]]), state._values, prompt=False)
        plain_embedding = numpy_helper.to_array(onnx.load(str(SPLIT / "embedding.onnx")).graph.initializer[0])
        np.testing.assert_allclose(step_flow["inputs_embeds"][0, 0], plain_embedding[5], rtol=1e-6)
        assert state.step(np.array([5])).shape == plain.shape


def test_per_image_takes_a_list_of_images_and_concatenates_their_outputs(tmp_path):
    folder, weight = _vision_folder(tmp_path, "per_image")
    with _generator(folder) as gen:
        images = [np.ones((1, 6), np.float32), np.full((2, 6), 2.0, np.float32)]
        values = gen._runtime.flow.run_init({"vision.pixel_values": images})
    np.testing.assert_allclose(values["vision.image_features"], np.concatenate(images) @ weight, rtol=1e-5, atol=1e-5)


def test_unknown_caller_inputs_are_refused_with_the_ones_the_pipeline_takes(tmp_path):
    folder, _ = _vision_folder(tmp_path, "batched")
    with _generator(folder) as gen:
        state = gen._runtime.new_state(1)
        with pytest.raises(InvalidInputError, match=r"vision\.pixels.*This pipeline takes: vision\.pixel_values"):
            state.set_inputs({"vision.pixels": np.zeros((1, 6), np.float32)})


# --------------------------------------------------------------------------- per-session execution providers


def test_a_session_asking_for_a_missing_provider_warns_and_runs_on_cpu(tmp_path):
    folder = tmp_path / "m"
    shutil.copytree(SPLIT, folder)
    description = json.loads((folder / DESCRIPTION_FILE).read_text(encoding="utf-8"))
    description["pipeline"]["sessions"]["embedding"]["execution_provider"] = "NoSuchExecutionProvider"
    description["pipeline"]["sessions"]["embedding"]["session_options"] = {"intra_op_num_threads": 1}
    (folder / DESCRIPTION_FILE).write_text(json.dumps(description), encoding="utf-8")
    with pytest.warns(RuntimeWarning, match=r'session "embedding" asks for NoSuchExecutionProvider.*run on the CPU'):
        gen = _generator(folder)
    with gen:
        session = gen._runtime.flow._sessions["embedding"]
        assert session.get_providers() == ["CPUExecutionProvider"]
        assert session.get_session_options().intra_op_num_threads == 1
        assert gen.generate("Hello", max_new_tokens=3, do_sample=False).generated_tokens == 3


# --------------------------------------------------------------------------- load-time validation


def _described(tmp_path: Path, pipeline: dict, *, base: Path = SPLIT, version: int = 2) -> Path:
    folder = tmp_path / "m"
    shutil.copytree(base, folder)
    (folder / DESCRIPTION_FILE).write_text(json.dumps({"version": version, "pipeline": pipeline}), encoding="utf-8")
    return folder


def _split_pipeline(**changes) -> dict:
    pipeline = {
        "sessions": {"embedding": {"file": "embedding.onnx"}, "decoder": {"file": "decoder.onnx"}},
        "flow": [{"run": "embedding", "when": "step"}, {"run": "decoder", "when": "step"}],
        "dataflow": [{"from": "embedding.inputs_embeds", "to": "decoder.inputs_embeds"}],
    }
    pipeline.update(changes)
    return pipeline


def _message(tmp_path: Path, pipeline: dict, **kwargs) -> str:
    with pytest.raises(PipelineSpecError) as info:
        load_pipeline(_described(tmp_path, pipeline, **kwargs))
    return str(info.value)


# The proposal's table (seeds/002 §7.4), one test each, with our wording of the same message.


def test_table_a_flow_step_naming_an_undeclared_session(tmp_path):
    message = _message(tmp_path, _split_pipeline(flow=[{"run": "vision", "when": "init"}, *_split_pipeline()["flow"]]))
    assert 'flow step references session "vision" but no such session is declared in pipeline.sessions' in message
    assert "(declared: embedding, decoder)" in message


def test_table_a_wire_naming_an_output_the_session_lacks(tmp_path):
    message = _message(
        tmp_path, _split_pipeline(dataflow=[{"from": "embedding.hidden", "to": "decoder.inputs_embeds"}])
    )
    assert (
        'Dataflow wire references output "hidden" but session "embedding" has no such output '
        "(available outputs: inputs_embeds)"
    ) in message


def test_table_an_unknown_position_ids_strategy(tmp_path):
    message = _message(tmp_path, _split_pipeline(state={"position_ids": {"strategy": "my_custom"}}))
    assert 'unknown position_ids strategy "my_custom". Valid options: auto, default, none' in message


def test_table_a_cycle_in_the_dataflow(tmp_path):
    folder_pipeline = _split_pipeline(
        dataflow=[
            {"from": "embedding.inputs_embeds", "to": "decoder.inputs_embeds"},
            {"from": "decoder.logits", "to": "embedding.input_ids"},
        ]
    )
    message = _message(tmp_path, folder_pipeline)
    assert "Circular dependency detected in dataflow: embedding → decoder → embedding" in message


def test_table_a_three_session_cycle_is_named_in_full(tmp_path):
    folder, _ = _vision_folder(tmp_path / "v", "batched")
    description = json.loads((folder / DESCRIPTION_FILE).read_text(encoding="utf-8"))
    description["pipeline"]["dataflow"].append({"from": "decoder.logits", "to": "vision.pixel_values"})
    (folder / DESCRIPTION_FILE).write_text(json.dumps(description), encoding="utf-8")
    with pytest.raises(
        PipelineSpecError, match="Circular dependency detected in dataflow: vision → embedding → decoder → vision"
    ):
        load_pipeline(folder)


def test_table_an_unknown_preset(tmp_path):
    message = _message(tmp_path, {"extends": "my-preset"})
    assert (
        'unknown pipeline preset "my-preset" in pipeline.extends. Built-in presets: autoregressive-decoder' in message
    )


def test_table_a_pipeline_without_sessions(tmp_path):
    message = _message(tmp_path, {"sessions": {}, "flow": []})
    assert 'the pipeline needs at least one session. Add "sessions": {"decoder": {"file": "model.onnx"}}' in message


# Beyond the table: what else a version-2 description can get wrong.


@pytest.mark.parametrize(
    "pipeline,fragment",
    [
        (
            _split_pipeline(dataflow=[{"from": "embedding.inputs_embeds", "to": "decoder.embeds"}]),
            'Dataflow wire references input "embeds" but session "decoder" has no such input (available inputs: '
            "inputs_embeds, attention_mask, position_ids, past_key_values.0.key",
        ),
        (
            _split_pipeline(dataflow=[{"from": "vision.image_features", "to": "decoder.inputs_embeds"}]),
            'Dataflow wire references session "vision" (from: "vision.image_features") but no such session is '
            "declared in pipeline.sessions (declared: embedding, decoder)",
        ),
        (
            _split_pipeline(dataflow=[{"from": "embedding", "to": "decoder.inputs_embeds"}]),
            'dataflow "from" must be "session.tensor"',
        ),
        (
            _split_pipeline(
                dataflow=[
                    {"from": "embedding.inputs_embeds", "to": "decoder.inputs_embeds"},
                    {"from": "embedding.inputs_embeds", "to": "decoder.inputs_embeds"},
                ]
            ),
            'input "inputs_embeds" of session "decoder" is fed by two dataflow wires',
        ),
        (
            _split_pipeline(flow=[{"run": "decoder", "when": "step"}, {"run": "embedding", "when": "step"}]),
            'session "embedding" (step) runs after "decoder" (step)',
        ),
        (
            _split_pipeline(
                sessions={"decoder": {"file": "decoder.onnx"}}, flow=[{"run": "decoder", "when": "step"}], dataflow=[]
            ),
            'the decoder "decoder" takes no input_ids, so its token embeddings must be wired',
        ),
        (
            _split_pipeline(flow=[{"run": "embedding", "when": "init"}, {"run": "decoder", "when": "step"}]),
            '"decoder.inputs_embeds" is fed by the init session "embedding", which runs once',
        ),
        (
            _split_pipeline(
                flow=[{"run": "embedding", "when": "step", "loop": "per_image"}, {"run": "decoder", "when": "step"}]
            ),
            '"loop" applies to "init" sessions and is one of batched, per_image',
        ),
        (
            _split_pipeline(dataflow=[{"from": "generation.ids", "to": "decoder.inputs_embeds"}]),
            'the finished generation exists only after the loop, so it feeds "final" sessions',
        ),
        (
            _split_pipeline(sessions={"embedding.x": {"file": "embedding.onnx"}, "decoder": {"file": "decoder.onnx"}}),
            'session name "embedding.x" is not allowed',
        ),
    ],
)
def test_other_dataflow_mistakes_name_the_fix(tmp_path, pipeline, fragment):
    assert fragment in _message(tmp_path, pipeline)


def test_an_unwired_embedding_session_is_named_as_a_second_decoder(tmp_path):
    message = _message(tmp_path, _split_pipeline(dataflow=[]))
    assert "here embedding, decoder all read the prompt: wire the one that feeds the decoder" in message


def test_dataflow_loop_and_final_need_version_2(tmp_path):
    assert 'Set "version": 2' in _message(tmp_path, _split_pipeline(), version=1)
    message = _message(
        tmp_path / "f",
        {"extends": "autoregressive-decoder", "flow": [{"run": "decoder", "when": "step"}]}
        | {"sessions": {"decoder": {"file": "decoder.onnx"}, "summary": {"file": "final.onnx"}}}
        | {"flow": [{"run": "decoder", "when": "step"}, {"run": "summary", "when": "final"}]},
        base=FINAL,
        version=1,
    )
    assert '"final", which is part of version 2 of the format' in message


def _graph_file(folder: Path, name: str, inputs: list, outputs: list, nodes: list) -> None:
    graph = helper.make_graph(nodes, name, inputs, outputs)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=9), str(folder / name))


@pytest.mark.parametrize(
    "elem,shape,fragment",
    [
        (TensorProto.FLOAT16, ["n", 32], "dtype mismatch, the output is float16 and the input is float32"),
        (TensorProto.FLOAT, ["n", 16], "shape mismatch, the output is [n, 16] and the input is [image_tokens, 32]"),
        (TensorProto.FLOAT, ["n", 4, 8], "shape mismatch, the output is [n, 4, 8] and the input is [image_tokens, 32]"),
    ],
)
def test_wired_tensors_must_agree_in_dtype_and_shape(tmp_path, elem, shape, fragment):
    folder, _ = _vision_folder(tmp_path, "batched")
    _graph_file(
        folder,
        "vision.onnx",
        [helper.make_tensor_value_info("pixel_values", elem, shape)],
        [helper.make_tensor_value_info("image_features", elem, shape)],
        [helper.make_node("Identity", ["pixel_values"], ["image_features"])],
    )
    with pytest.raises(PipelineSpecError) as info:
        load_pipeline(folder)
    assert 'dataflow wire "vision.image_features" → "embedding.image_features": ' + fragment in str(info.value)


def test_a_final_session_with_an_unfed_input_is_refused(tmp_path):
    pipeline = {
        "sessions": {"decoder": {"file": "decoder.onnx"}, "summary": {"file": "final.onnx"}},
        "flow": [{"run": "decoder", "when": "step"}, {"run": "summary", "when": "final"}],
        "dataflow": [{"from": "generation.ids", "to": "summary.ids"}],
    }
    message = _message(tmp_path, pipeline, base=FINAL)
    assert 'input "sequence" of session "summary" is not fed: wire it in "dataflow"' in message


def test_step_outputs_cannot_feed_a_final_session_yet(tmp_path):
    pipeline = {
        "sessions": {"decoder": {"file": "decoder.onnx"}, "summary": {"file": "final.onnx"}},
        "flow": [{"run": "decoder", "when": "step"}, {"run": "summary", "when": "final"}],
        "dataflow": [
            {"from": "decoder.logits", "to": "summary.ids"},
            {"from": "generation.sequence", "to": "summary.sequence"},
        ],
    }
    message = _message(tmp_path, pipeline, base=FINAL)
    assert "collecting a step session's outputs over the run is not supported" in message
    assert 'feed final sessions from "generation.ids"' in message


def test_generated_ids_must_feed_an_integer_input(tmp_path):
    folder = tmp_path / "m"
    shutil.copytree(FINAL, folder)
    _graph_file(
        folder,
        "final.onnx",
        [
            helper.make_tensor_value_info("ids", TensorProto.FLOAT, [1, "n"]),
            helper.make_tensor_value_info("sequence", TensorProto.INT64, [1, "m"]),
        ],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, "n"])],
        [helper.make_node("Identity", ["ids"], ["out"])],
    )
    with pytest.raises(PipelineSpecError, match="the generated ids are integers but the input is float32"):
        load_pipeline(folder)


def test_version_2_descriptions_validate_against_the_published_schema():
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads(schema_path().read_text(encoding="utf-8"))
    for folder in (SPLIT, FINAL):
        raw = json.loads((folder / DESCRIPTION_FILE).read_text(encoding="utf-8"))
        jsonschema.validate(raw, schema)
        jsonschema.validate(load_pipeline(folder).describe(), schema)
    raw["pipeline"]["flow"][0]["loop"] = "per_token"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(raw, schema)


def test_version_1_descriptions_load_as_before(tmp_path):
    folder = tmp_path / "m"
    shutil.copytree(MODELS / "llama", folder)
    (folder / DESCRIPTION_FILE).write_text(
        json.dumps({"version": 1, "pipeline": {"extends": "autoregressive-decoder"}})
    )
    spec = load_pipeline(folder)
    assert spec.dataflow == () and spec.describe()["version"] == 1 and spec.roles == {"decoder": "decoder"}


def test_the_encoder_decoder_runtime_refuses_extra_sessions_instead_of_ignoring_them(tmp_path):
    from inference4py.engine.pipeline import read_model_config
    from inference4py.engine.seq2seq import Seq2SeqRuntime
    from inference4py.errors import UnsupportedModelError

    folder = tmp_path / "t5"
    shutil.copytree(MODELS / "t5", folder)
    shutil.copyfile(FINAL / "final.onnx", folder / "final.onnx")
    description = load_pipeline(folder).describe()
    pipeline = description["pipeline"]
    description["version"] = 2
    pipeline["sessions"]["summary"] = {"file": "final.onnx"}
    pipeline["flow"].append({"run": "summary", "when": "final"})
    pipeline["dataflow"] = [
        {"from": "generation.ids", "to": "summary.ids"},
        {"from": "generation.sequence", "to": "summary.sequence"},
    ]
    (folder / DESCRIPTION_FILE).write_text(json.dumps(description), encoding="utf-8")
    spec = load_pipeline(folder)
    assert spec.has("encoder") and spec.flow["final"] == ("summary",)
    with pytest.raises(UnsupportedModelError, match="also has summary"):
        Seq2SeqRuntime(spec, read_model_config(folder))


# --------------------------------------------------------------------------- parts layouts (vision-language exports)


@pytest.mark.parametrize("name", ["llava-tiny", "idefics3-tiny"])
def test_a_parts_export_is_detected_as_an_embedding_session_wired_into_its_decoder(name):
    spec = load_pipeline(MODELS / name)
    assert spec.source == "detected"
    assert {n: s.file for n, s in spec.sessions.items()} == {
        "embedding": "onnx/embed_tokens.onnx",
        "decoder": "onnx/decoder_model_merged.onnx",
    }
    assert [w.to_json() for w in spec.dataflow] == [{"from": "embedding.inputs_embeds", "to": "decoder.inputs_embeds"}]


def _llava_cases() -> dict:
    return {c["name"]: c for c in load_reference("vision_language")["cases"]}


def test_the_text_of_a_vision_language_export_runs_as_a_text_generator():
    case = _llava_cases()["text-only"]
    with _generator(MODELS / "llava-tiny") as gen:
        got = gen.generate(case["prompt_ids"], max_new_tokens=case["max_new_tokens"], do_sample=False)
    assert list(got.token_ids) == case["output_ids"]  # transformers' LLaVA generate() without an image


@pytest.mark.parametrize("case_name", ["one-image", "two-images"])
def test_a_task_can_hand_the_prompt_embeddings_with_image_features_to_the_engine(case_name):
    """What a vision-language task does over the engine: features merged into the prompt's
    embeddings (LLaVA's rule, written here in numpy), then set_inputs + the normal loop."""
    import onnxruntime as ort

    from inference4py.generation.generate import generate_chunks

    case = _llava_cases()[case_name]
    folder = MODELS / "llava-tiny"
    pixels = np.load(folder / "pixel_values.npz")[case_name]
    vision = ort.InferenceSession(str(folder / "onnx/vision_encoder.onnx"), providers=["CPUExecutionProvider"])
    features = vision.run(None, {"pixel_values": pixels})[0].reshape(-1, 32)  # [images * 16, hidden]
    table = ort.InferenceSession(str(folder / "onnx/embed_tokens.onnx"), providers=["CPUExecutionProvider"])
    ids = np.asarray([case["prompt_ids"]], dtype=np.int64)
    embeds = table.run(None, {"input_ids": np.where(ids == 1200, 0, ids)})[0]  # [1, n, hidden]
    embeds[ids == 1200] = features
    with _generator(folder) as gen:
        assert gen._runtime.flow.prompt_outputs == ("embedding.inputs_embeds",)
        state = gen._runtime.new_state(1)
        state.set_inputs({"embedding.inputs_embeds": embeds})
        config = GenerationConfig(max_new_tokens=case["max_new_tokens"], do_sample=False, eos_token_id=(2,))
        chunks = list(generate_chunks(state, case["prompt_ids"], config, gen.tokenizer))
    assert [c.token_id for c in chunks if c.token_id is not None] == case["output_ids"]


# --------------------------------------------------------------------------- genai vision-language folders


PHI3V = MODELS / "genai-phi3v"


def _phi3v_cases() -> dict:
    return {c["name"]: c for c in load_reference("genai")["models"]["genai-phi3v"]["cases"]}


def test_a_genai_vision_language_config_translates_to_the_proposals_version_2_pipeline():
    spec = load_pipeline(PHI3V)
    described = spec.describe()["pipeline"]
    assert described["flow"] == [
        {"run": "vision", "when": "init"},
        {"run": "embedding", "when": "step"},
        {"run": "decoder", "when": "step"},
    ]
    assert described["dataflow"] == [
        {"from": "vision.image_features", "to": "embedding.image_features"},
        {"from": "embedding.inputs_embeds", "to": "decoder.inputs_embeds"},
    ]
    assert spec.roles == {"decoder": "decoder"}


@pytest.mark.parametrize("case_name", ["text-only", "one-image", "two-images"])
def test_phi3v_runs_on_the_engine_from_its_description_alone(case_name):
    """The vision session runs at the first prefill on the caller's pixel values, its features reach
    the embedding session by the wire, the GroupQueryAttention decoder reads the embeddings: the ids
    are onnxruntime-genai's (and transformers'). Prompt ids and pixels come from the task's processor."""
    from inference4py import VisionLanguageModel
    from inference4py.generation.generate import generate_chunks

    case = _phi3v_cases()[case_name]
    with VisionLanguageModel.builder().model_path(PHI3V).build() as vlm:
        ids, batch = vlm.encode(case["text"], [MODELS.parent / p for p in case["images"]])
    assert ids[:8] == case["prompt_ids_head"] and len(ids) == case["prompt_tokens"]
    with _generator(PHI3V) as gen:
        assert gen._runtime.flow.caller_inputs == ("vision.pixel_values", "vision.image_sizes")
        if not case["images"]:  # text only: the plain text generator, the vision session skipped
            got = gen.generate(ids, max_new_tokens=case["max_new_tokens"], do_sample=False).token_ids
            assert list(got) == case["output_ids"]
            return
        state = gen._runtime.new_state(1)
        state.set_inputs({f"vision.{k}": v for k, v in batch.inputs.items()})
        config = GenerationConfig(max_new_tokens=case["max_new_tokens"], do_sample=False, eos_token_id=(1203, 2))
        chunks = list(generate_chunks(state, ids, config, gen.tokenizer))
    assert [c.token_id for c in chunks if c.token_id is not None] == case["output_ids"]


def test_a_final_session_reads_an_init_sessions_output_too(tmp_path):
    folder = tmp_path / "m"
    shutil.copytree(FINAL, folder)
    _graph_file(
        folder,
        "tag.onnx",
        [helper.make_tensor_value_info("offset", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("scaled", TensorProto.FLOAT, [1, 4])],
        [helper.make_node("Add", ["offset", "offset"], ["scaled"])],
    )
    table = _final_table()
    graph = helper.make_graph(
        [
            helper.make_node("Gather", ["table", "ids"], ["rows"]),
            helper.make_node("ReduceSum", ["rows", "axis1"], ["summed"], keepdims=0),
            helper.make_node("Add", ["summed", "extra"], ["total"]),
        ],
        "final",
        [
            helper.make_tensor_value_info("ids", TensorProto.INT64, [1, "n"]),
            helper.make_tensor_value_info("extra", TensorProto.FLOAT, [1, 4]),
        ],
        [helper.make_tensor_value_info("total", TensorProto.FLOAT, [1, 4])],
        initializer=[numpy_helper.from_array(table, "table"), numpy_helper.from_array(np.array([1]), "axis1")],
    )
    onnx.save(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=9), str(folder / "final.onnx")
    )
    description = {
        "version": 2,
        "pipeline": {
            "sessions": {
                "tag": {"file": "tag.onnx"},
                "decoder": {"file": "decoder.onnx"},
                "summary": {"file": "final.onnx"},
            },
            "flow": [
                {"run": "tag", "when": "init"},
                {"run": "decoder", "when": "step"},
                {"run": "summary", "when": "final"},
            ],
            "dataflow": [
                {"from": "generation.ids", "to": "summary.ids"},
                {"from": "tag.scaled", "to": "summary.extra"},
            ],
        },
    }
    (folder / DESCRIPTION_FILE).write_text(json.dumps(description), encoding="utf-8")
    offset = np.array([[0.5, -1.0, 2.0, 0.25]], dtype=np.float32)
    with _generator(folder) as gen:
        assert gen._runtime.flow.caller_inputs == ("tag.offset",)
        state = gen._runtime.new_state(1)
        state.set_inputs({"tag.offset": offset})
        config = GenerationConfig(max_new_tokens=5, do_sample=False, eos_token_id=(2,))
        from inference4py.generation.generate import collect, generate_chunks

        prompt = gen.encode_prompt("The old house")
        result = collect(generate_chunks(state, prompt, config, gen.tokenizer), prompt_tokens=len(prompt), started=0.0)
    want = table[list(result.token_ids)].sum(axis=0)[None] + 2 * offset
    np.testing.assert_allclose(result.final_outputs["summary.total"], want, rtol=1e-6)
