"""One sampling rule at every edge (issue 46): the same options give the same tokens through the
builder, ``generate(**options)``, ``inference4py generate``, ``inference4py batch`` and the
server (real uvicorn, the official ``openai`` client).

Texts are compared at the edges that answer with text (the CLI, the server), ids where the
result carries them.  The fixture model's generation_config.json leaves ``do_sample`` off, so a request that sets only
``top_k`` / ``top_p`` samples only if the edge follows the rule (GenerationConfig.with_request).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from inference4py import OnnxTextGenerator
from inference4py.batch import read_results, row_seed
from inference4py.cli import main
from tests.conftest import FIXTURES

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
openai = pytest.importorskip("openai")

from inference4py.serve import create_app, load_models  # noqa: E402
from tests.serve.support import running  # noqa: E402

QWEN = FIXTURES / "models" / "qwen2"
PROMPT = "Once upon a time"
JOB_SEED = 11
ROW_SEED = row_seed(JOB_SEED, "0")  # the batch runner's seed of its first row, given to every other edge
LENGTH = 12

# name -> (options without the seed, sampled?)
CASES: dict[str, tuple[dict[str, Any], bool]] = {
    "model default": ({}, False),
    "temperature 0 beside filters": ({"temperature": 0.0, "top_k": 5, "top_p": 0.9}, False),
    "filters alone": ({"top_k": 5, "top_p": 0.9}, True),
    "temperature and filters": ({"temperature": 1.5, "top_k": 8, "top_p": 0.95}, True),
}


@pytest.fixture(scope="module")
def model():
    with OnnxTextGenerator.builder().model_path(QWEN).build() as gen:
        yield gen


@pytest.fixture(scope="module")
def client():
    with running(create_app(load_models([str(QWEN)]))) as url:
        yield openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0, timeout=60)


def _builder(options: dict[str, Any]) -> Any:
    builder = OnnxTextGenerator.builder().model_path(QWEN).max_new_tokens(LENGTH).seed(ROW_SEED)
    for name, value in options.items():
        builder = getattr(builder, name)(value)
    with builder.build() as gen:
        return gen.generate(PROMPT)


def _cli_generate(options: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> str:
    flags = [f"--{name.replace('_', '-')}={value}" for name, value in options.items()]
    capsys.readouterr()
    code = main(["generate", "-m", str(QWEN), f"--max-new-tokens={LENGTH}", f"--seed={ROW_SEED}", *flags, PROMPT])
    assert code == 0
    out = capsys.readouterr().out
    return out[:-1] if out.endswith("\n") else out  # the echo ends the line


def _cli_batch(options: dict[str, Any], tmp_path: Any) -> str:
    source = tmp_path / "in.jsonl"
    source.write_text(json.dumps({"prompt": PROMPT}) + "\n", encoding="utf-8")
    flags = [f"--{name.replace('_', '-')}={value}" for name, value in options.items()]
    argv = ["batch", "-m", str(QWEN), "-i", str(source), "-o", str(tmp_path / "out"), "--no-progress"]
    assert main([*argv, f"--max-new-tokens={LENGTH}", f"--seed={JOB_SEED}", *flags]) == 0
    (row,) = read_results(tmp_path / "out")
    assert row["id"] == "0" and row["error"] is None
    return str(row["text"])


def _server(options: dict[str, Any], client: Any) -> str:
    top_k = {"top_k": options["top_k"]} if "top_k" in options else {}
    openai_fields = {k: v for k, v in options.items() if k != "top_k"}
    response = client.completions.create(
        model="qwen2", prompt=PROMPT, max_tokens=LENGTH, seed=ROW_SEED, extra_body=top_k, **openai_fields
    )
    return str(response.choices[0].text)


@pytest.mark.parametrize("case", list(CASES))
def test_the_same_options_give_the_same_tokens_at_every_edge(case, model, client, capsys, tmp_path):
    options, sampled = CASES[case]
    keywords = model.generate(PROMPT, max_new_tokens=LENGTH, seed=ROW_SEED, **options)
    greedy = model.generate(PROMPT, max_new_tokens=LENGTH, do_sample=False)
    assert (keywords.token_ids != greedy.token_ids) is sampled  # the kind of answer the rule says
    assert model.generation_config.do_sample is False  # the model's own setting is greedy
    built = _builder(options)
    assert built.token_ids == keywords.token_ids
    answers = {
        "builder": built.text,
        "inference4py generate": _cli_generate(options, capsys),
        "inference4py batch": _cli_batch(options, tmp_path),
        "server": _server(options, client),
    }
    assert answers == dict.fromkeys(answers, keywords.text)
