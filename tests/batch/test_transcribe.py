"""run_batch(task="transcribe"): a column of audio paths, each row equal to transcribe() alone."""

from __future__ import annotations

import numpy as np
import pytest
import soundfile as sf  # librosa's dependency, installed with the library

from inference4py import WhisperSpeechModel
from inference4py.audio import SAMPLE_RATE
from inference4py.batch import read_results, row_seed, run_batch
from tests.batch.conftest import by_id, write_csv, write_jsonl
from tests.conftest import MODELS

WHISPER = str(MODELS / "whisper")


@pytest.fixture(scope="module")
def asr():
    with WhisperSpeechModel.builder().model_path(WHISPER).build() as model:
        yield model


def _clips(folder):
    from tests.speech.test_whisper import clips

    audio = folder / "audio"
    audio.mkdir()
    paths = []
    for name in ("tone", "chirp", "noise"):
        sf.write(audio / f"{name}.wav", clips()[name].astype(np.float32), SAMPLE_RATE)
        paths.append(f"audio/{name}.wav")  # relative to the input file's folder
    (audio / "junk.wav").write_bytes(b"RIFF....WAVEjunk")
    return paths


def test_audio_rows_equal_alone_and_bad_audio_is_an_error_row(tmp_path, asr, monkeypatch):
    paths = _clips(tmp_path)
    records = [{"audio": p} for p in paths] + [{"audio": "audio/missing.wav"}, {"audio": "audio/junk.wav"}, {}]
    src = write_jsonl(tmp_path / "in.jsonl", records)
    monkeypatch.chdir(MODELS)  # the paths resolve from the input's folder, not the working one
    report = run_batch(
        src, tmp_path / "out", model=WHISPER, task="transcribe", source_language="en", max_new_tokens=8,
        batch_size=4, progress=False,
    )  # fmt: skip
    rows = by_id(read_results(tmp_path / "out"))
    assert (report.completed, report.errors) == (6, 3)
    for i, path in enumerate(paths):
        alone = asr.transcribe(str(tmp_path / path), language="en", max_new_tokens=8)
        assert rows[str(i)]["error"] is None
        assert (rows[str(i)]["text"], rows[str(i)]["completion_tokens"]) == (alone.text, len(alone.token_ids))
    assert rows["3"]["error"] == (
        f"AudioError: The audio file '{tmp_path / 'audio' / 'missing.wav'}' does not exist: "
        "fix the path (a relative path starts at the input file's folder)."
    )
    assert rows["4"]["error"].startswith("AudioError:") and rows["4"]["text"] is None
    assert rows["5"]["error"].startswith("InvalidInputError: The row has no audio path")


def test_seeded_rows_use_their_row_seed(tmp_path, asr):
    paths = _clips(tmp_path)
    src = write_csv(tmp_path / "in.csv", [{"id": f"a{i}", "audio": p} for i, p in enumerate(paths)])
    options = dict(model=WHISPER, task="transcribe", id_column="id", seed=11, temperature=1.0, max_new_tokens=6)
    run_batch(src, tmp_path / "out", progress=False, **options)
    rows = by_id(read_results(tmp_path / "out"))
    for i, path in enumerate(paths):
        alone = asr.transcribe(str(tmp_path / path), seed=row_seed(11, f"a{i}"), temperature=1.0, max_new_tokens=6)
        assert rows[f"a{i}"]["text"] == alone.text


def test_the_jobs_keywords_are_one_typed_transcribe_options_refused_before_any_audio(tmp_path, monkeypatch):
    from inference4py.batch.adapters import load_adapter
    from inference4py.errors import ConfigurationError
    from inference4py.speech import TranscribeOptions
    from inference4py.tasks.options import RequestOptions

    def never(*args, **kwargs):
        raise AssertionError("no audio is read for a refused job")

    monkeypatch.setattr("inference4py.audio.load_audio", never)
    missing = str(tmp_path / "no-model-here")  # refused before the model would load
    for overrides, named in (({"max_new_tokns": 8}, "max_new_tokns"), ({"best_of": 0}, "best_of")):
        with pytest.raises(ConfigurationError, match=named):
            load_adapter(missing, task="transcribe", overrides=overrides)
    with pytest.raises(ConfigurationError, match="drop json_schema"):
        load_adapter(missing, task="transcribe", overrides={"json_schema": {"type": "object"}})
    monkeypatch.undo()
    adapter = load_adapter(WHISPER, task="transcribe", overrides={"max_new_tokens": 8, "temperature": 0.0})
    try:
        assert adapter.options == TranscribeOptions(temperature=0.0, generation=RequestOptions(max_new_tokens=8))
    finally:
        adapter.close()
