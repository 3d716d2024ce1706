"""The GGUF fixtures' references files and what the tests of those files share.

tools/fixtures/gguf_moe.py, gguf_mla.py and gguf_gptoss.py write tiny GGUF files beside a references file
(``moe-references.json``, ``mla-references.json``, ...) whose ``models`` map each file to its entry: family,
type, tokenizer folder, eos ids and ``cases`` (prompt ids with transformers' greedy and beam ids).  Here:
those cases as test parameters, a module's generators on the files' conversions, the library's ids as the
references are compared, and ``rewrite``, a copy of a file with keys or tensors changed (the bad files).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from inference4py import OnnxTextGenerator
from tests.conftest import FIXTURES
from tests.gguf.test_convert import _kind
from tests.gguf.test_graph import write_folder

GGUF_DIR = FIXTURES / "gguf"


def load(name: str) -> dict[str, Any]:
    """The references file ``name`` of tests/fixtures/gguf."""
    return json.loads((GGUF_DIR / name).read_text(encoding="utf-8"))


def case_params(models: dict[str, Any], *types: str, id_format: str = "{family}-{type}-{case}") -> list[Any]:
    """``(file, case)`` test parameters over the cases of ``models`` of ``types`` (every type when none is
    named), in the file's order; each id is ``id_format`` of the entry's family and type and the case's name."""
    return [
        pytest.param(name, case, id=id_format.format(family=entry["family"], type=entry["type"], case=case["name"]))
        for name, entry in models.items()
        if not types or entry["type"] in types
        for case in entry["cases"]
    ]


def stable(case: dict[str, Any]) -> list[int]:
    """The reference ids up to the first greedy step whose two best logits are within min_logit_gap."""
    return case["output_ids"][: case["stable_prefix"]]


def greedy(gen: OnnxTextGenerator, case: dict[str, Any]) -> list[int]:
    """``gen``'s greedy ids on the case's prompt, at most its ``max_new_tokens``."""
    result = gen.generate(case["prompt_ids"], max_new_tokens=case["max_new_tokens"], do_sample=False)
    return list(result.token_ids)


def beam(gen: OnnxTextGenerator, case: dict[str, Any]) -> list[list[int]]:
    """``gen``'s beam candidates' ids with the case's beam settings."""
    settings = case["beam"]
    result = gen.generate(
        case["prompt_ids"],
        max_new_tokens=settings["max_new_tokens"],
        num_beams=settings["num_beams"],
        num_return_sequences=settings["num_return_sequences"],
        do_sample=False,
    )
    return [list(c.token_ids) for c in result.candidates]


def batched(gen: OnnxTextGenerator, cases: list[dict[str, Any]]) -> list[list[int]]:
    """``gen``'s greedy ids on every case's prompt in one batch, each row cut to its case's length."""
    results = gen.generate_batch(
        [c["prompt_ids"] for c in cases], max_new_tokens=max(c["max_new_tokens"] for c in cases), do_sample=False
    )
    return [list(result.token_ids)[: case["max_new_tokens"]] for case, result in zip(cases, results)]


def agreement(gen: OnnxTextGenerator, cases: list[dict[str, Any]]) -> str:
    """Greedy steps before the first difference from the references, over ``cases``: ``"agreeing/total"``."""
    agree = total = 0
    for case in cases:
        got = greedy(gen, case)
        assert got
        agree += next((i for i, (a, b) in enumerate(zip(got, case["output_ids"])) if a != b), len(got))
        total += len(case["output_ids"])
    return f"{agree}/{total}"


class Conversions:
    """``generator(file, bits)``: the library's generator on that conversion of a fixture file (write_folder's
    folder, its tokenizer and eos from ``models``), each built once; ``generator.folder(file, bits)``: the folder."""

    def __init__(self, models: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> None:
        self.models = models
        self.tmp_path_factory = tmp_path_factory
        self._folders: dict[tuple[str, int | None], Path] = {}
        self._generators: dict[tuple[str, int | None], OnnxTextGenerator] = {}

    def folder(self, name: str, bits: int | None = 32) -> Path:
        key = (name, bits)
        if key not in self._folders:
            folder = self.tmp_path_factory.mktemp(f"{name}-{bits}")
            self._folders[key] = write_folder(name, bits, folder, self.models[name])
        return self._folders[key]

    def __call__(self, name: str, bits: int | None = 32) -> OnnxTextGenerator:
        key = (name, bits)
        if key not in self._generators:
            self._generators[key] = OnnxTextGenerator.builder().model_path(self.folder(name, bits)).build()
        return self._generators[key]


def generator_fixture(models: dict[str, Any]) -> Any:
    """A module-scope fixture ``generator``, Conversions over ``models``: ``generator = generator_fixture(MODELS)``
    in the test module."""

    @pytest.fixture(scope="module", name="generator")
    def fixture(tmp_path_factory: pytest.TempPathFactory) -> Conversions:
        return Conversions(models, tmp_path_factory)

    return fixture


def rewrite(
    source: str,
    path: Path,
    *,
    keys: dict[str, Any] | None = None,
    drop: tuple[str, ...] = (),
    tensors: dict[str, np.ndarray] | None = None,
) -> Path:
    """A copy of fixture ``source`` with metadata ``keys`` set (None: removed), tensors ``drop`` left out and
    ``tensors`` replaced (or added, when the source has no such tensor)."""
    import gguf

    from inference4py.gguf.reader import GGUFFile

    src = GGUFFile(GGUF_DIR / source)
    writer = gguf.GGUFWriter(str(path), src.architecture)
    for key, value in {**src.metadata, **(keys or {})}.items():
        if key != "general.architecture" and value is not None:
            kind, sub = _kind(value)
            writer.add_key_value(key, value, kind, sub_type=sub)
    for info in src.tensors():
        if info.name not in drop:
            writer.add_tensor(info.name, np.ascontiguousarray((tensors or {}).get(info.name, src.tensor(info.name))))
    for name, value in (tensors or {}).items():
        if name not in src:
            writer.add_tensor(name, np.ascontiguousarray(value))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
