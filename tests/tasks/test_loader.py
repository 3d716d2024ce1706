"""The one loader, presets as data, and one public method per call shape (options= or keywords)."""

from __future__ import annotations

import pytest

from inference4py import (
    BartSummarizer,
    CoeditGrammarCorrector,
    FlanT5TextGenerator,
    MarianTranslator,
    OnnxEmbedder,
    OnnxReranker,
    OnnxTextGenerator,
    RequestOptions,
    T5SqlGenerator,
    VisionLanguageModel,
)
from inference4py.errors import ConfigurationError
from inference4py.tasks.bart import BART_PRESETS
from inference4py.tasks.coedit import COEDIT_PRESETS
from inference4py.tasks.embedding.model import EMBEDDER_PRESETS
from inference4py.tasks.encoder import EncoderTask
from inference4py.tasks.flan_t5 import FLAN_T5_PRESETS
from inference4py.tasks.loader import GenerativeTask
from inference4py.tasks.marian import MARIAN_PRESETS
from inference4py.tasks.presets import Preset, PresetTable
from inference4py.tasks.rerank import RERANKER_PRESETS
from inference4py.tasks.t5_sql import T5_SQL_PRESETS
from inference4py.tasks.text_generation import TEXT_PRESETS
from inference4py.tasks.vision_language import VISION_PRESETS
from tests.conftest import FIXTURES

TABLES = [
    (OnnxTextGenerator, TEXT_PRESETS),
    (FlanT5TextGenerator, FLAN_T5_PRESETS),
    (BartSummarizer, BART_PRESETS),
    (MarianTranslator, MARIAN_PRESETS),
    (CoeditGrammarCorrector, COEDIT_PRESETS),
    (T5SqlGenerator, T5_SQL_PRESETS),
    (VisionLanguageModel, VISION_PRESETS),
    (OnnxEmbedder, EMBEDDER_PRESETS),
    (OnnxReranker, RERANKER_PRESETS),
]

# inference4j's method names, as users call them (a renamed or lost row fails here)
NAMES = {
    OnnxTextGenerator: {"gpt2", "smolLM2", "smolLM2_1_7B", "qwen2", "tinyLlama", "gemma2"},
    FlanT5TextGenerator: {"flanT5Small", "flanT5Base", "flanT5Large"},
    BartSummarizer: {"distilBartCnn", "bartLargeCnn"},
    MarianTranslator: {"opusMtEnDe", "opusMtEnFr", "opusMtEnEs"},
    CoeditGrammarCorrector: {"coeditBase", "coeditLarge"},
    T5SqlGenerator: {"t5SmallAwesome", "t5LargeSpider"},
    VisionLanguageModel: {"phi3Vision"},
    OnnxEmbedder: {"allMiniLML6V2", "bgeSmallEnV15"},
    OnnxReranker: {"bgeRerankerBase", "msMarcoMiniLML6V2"},
}


@pytest.mark.parametrize("cls,table", TABLES, ids=lambda x: getattr(x, "__name__", ""))
def test_every_preset_method_is_a_row_of_its_table(cls, table):
    assert set(table.rows) == NAMES[cls]
    for name, row in table.rows.items():
        method = getattr(cls, name)
        builder = method()
        assert method.__name__ == name and method.__doc__ == row.doc
        assert builder._preset == name and builder._model_id == row.model_id
        assert f"preset={name!r}" in repr(builder)
        assert builder._task is cls
    assert cls.builder()._preset is None and cls.builder()._model_id is None


def test_preset_defaults_reach_the_builder():
    smol = OnnxTextGenerator.smolLM2()
    assert (
        smol._use_chat_template is True
        and smol._preset_template == TEXT_PRESETS.rows["smolLM2"].defaults["chat_template"]
    )
    assert OnnxTextGenerator.gemma2()._model_id is None
    assert MarianTranslator.opusMtEnFr()._preset_fields["target"].iso_code == "fr"
    assert CoeditGrammarCorrector.coeditLarge()._prompt_formatter("x") == "Fix grammatical errors in this sentence: x"


def test_a_table_refuses_a_repeated_row_and_a_misnamed_attribute():
    row = Preset("a", "org/a", "A.")
    with pytest.raises(ValueError, match="twice"):
        PresetTable(OnnxTextGenerator.Builder, [row, row])
    table = PresetTable(OnnxTextGenerator.Builder, [row])
    with pytest.raises((TypeError, RuntimeError)) as caught:  # Python < 3.12 wraps __set_name__'s error

        class Wrong:
            b = table.method("a")

    assert "name the attribute a" in str(caught.value) + str(caught.value.__cause__)


def test_a_subclass_preset_builds_the_subclass():
    class MyBart(BartSummarizer):
        pass

    model = MyBart.builder().model_path(FIXTURES / "models" / "bart").build()
    assert type(model) is MyBart and repr(model).startswith("MyBart(folder=")


@pytest.mark.parametrize(
    "cls,folder",
    [(OnnxTextGenerator, "gpt2"), (BartSummarizer, "bart"), (VisionLanguageModel, "llava-tiny")],
)
def test_the_generative_classes_share_the_loader(cls, folder):
    model = cls.builder().model_path(FIXTURES / "models" / folder).max_new_tokens(3).build()
    assert isinstance(model, GenerativeTask)
    assert model.generation_config.max_new_tokens == 3
    assert model.tokenizer is not None and model.generation_config.eos_token_id
    model.close()
    assert "folder=" in repr(model)


@pytest.mark.parametrize("cls,folder", [(OnnxEmbedder, "sentence-bert"), (OnnxReranker, "cross-encoder")])
def test_the_encoder_classes_share_the_loader(cls, folder):
    model = cls.builder().model_path(FIXTURES / "models" / folder).batch_size(2).build()
    assert isinstance(model, EncoderTask)
    assert model.batch_size == 2 and model.name == folder and model.folder == FIXTURES / "models" / folder
    assert "_from_builder" not in vars(cls)  # each class says only what differs (the loader's hooks)
    model.close()
    assert model._session is None


# --------------------------------------------------------------------------- one method per call shape
@pytest.fixture(scope="module")
def gpt2():
    with OnnxTextGenerator.builder().model_path(FIXTURES / "models" / "gpt2").build() as model:
        yield model


def test_generate_takes_typed_options_or_keywords_with_the_same_tokens(gpt2):
    typed = gpt2.generate("Hello", options=RequestOptions(max_new_tokens=5, do_sample=False))
    keywords = gpt2.generate("Hello", max_new_tokens=5, do_sample=False)
    assert typed.token_ids == keywords.token_ids and len(typed.token_ids) == 5
    # keywords beside options replace those fields
    both = gpt2.generate("Hello", options=RequestOptions(max_new_tokens=9, do_sample=False), max_new_tokens=5)
    assert both.token_ids == keywords.token_ids
    chunks = list(gpt2.stream_chunks("Hello", options=RequestOptions(max_new_tokens=5, do_sample=False)))
    assert tuple(c.token_id for c in chunks if c.token_id is not None) == keywords.token_ids
    batch = gpt2.generate_batch(["Hello"], options=RequestOptions(max_new_tokens=5, do_sample=False))
    assert batch[0].token_ids == keywords.token_ids


def test_options_must_be_request_options(gpt2):
    with pytest.raises(ConfigurationError, match="RequestOptions"):
        gpt2.generate("Hello", options={"max_new_tokens": 5})


def test_the_old_typed_names_warn_and_give_the_same_result(gpt2):
    options = RequestOptions(max_new_tokens=4, do_sample=False)
    expected = gpt2.generate("Hello", options=options).token_ids
    with pytest.deprecated_call(match="generate_request"):
        assert gpt2.generate_request("Hello", options).token_ids == expected
    with pytest.deprecated_call(match="request_chunks"):
        chunks = list(gpt2.request_chunks("Hello", options))
    assert tuple(c.token_id for c in chunks if c.token_id is not None) == expected
    with gpt2.batched(max_concurrent=1) as batched, pytest.deprecated_call(match="generate_batch_request"):
        assert batched.generate_batch_request(["Hello"], options)[0].token_ids == expected


def test_seq2seq_request_chunks_is_a_deprecated_stream_chunks():
    with BartSummarizer.builder().model_path(FIXTURES / "models" / "bart").build() as bart:
        options = RequestOptions(max_new_tokens=4)
        expected = bart.generate("Hello world", options=options).token_ids
        assert bart.generate("Hello world", max_new_tokens=4).token_ids == expected
        with pytest.deprecated_call(match="request_chunks"):
            chunks = list(bart.request_chunks("Hello world", options))
        assert tuple(c.token_id for c in chunks if c.token_id is not None) == expected


def test_vision_stream_chunks_runs_a_prepared_request():
    folder = FIXTURES / "models" / "llava-tiny"
    image = folder / "images" / "sea.png"
    with VisionLanguageModel.builder().model_path(folder).build() as vlm:
        expected = vlm.generate(image, "Describe this image.", max_new_tokens=3).token_ids
        options = RequestOptions(max_new_tokens=3)
        request = vlm.prepare("Describe this image.", options, image)
        chunks = list(vlm.stream_chunks(None, request))
        assert tuple(c.token_id for c in chunks if c.token_id is not None) == expected
        with pytest.raises(ConfigurationError, match="prepared VisionRequest"):
            vlm.stream_chunks(None, request, max_new_tokens=2)
        with pytest.deprecated_call(match="request_chunks"):
            old = list(vlm.request_chunks(request, options))
        assert tuple(c.token_id for c in old if c.token_id is not None) == expected
