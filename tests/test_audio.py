"""inference4py.audio: loading, resampling, and Whisper log-mel features against transformers."""

from __future__ import annotations

import re
import sys

import numpy as np
import pytest
import soundfile as sf

from inference4py.audio import N_FRAMES, SAMPLE_RATE, load_audio, log_mel_spectrogram, mel_filters, resample
from inference4py.errors import AudioError
from tests.conftest import FIXTURES, load_reference

REF = load_reference("whisper")


def _clips() -> dict[str, np.ndarray]:
    return {name: load_audio(FIXTURES / info["file"]) for name, info in REF["clips"].items()}


def assemble(recipe, clips) -> np.ndarray:
    """The long clip from its recipe (same arithmetic as tools/fixtures/whisper.py)."""
    parts = []
    for p in recipe:
        if p["clip"] == "silence":
            parts.append(np.zeros(int(round(p["seconds"] * SAMPLE_RATE)), dtype=np.float32))
        else:
            a, b = int(round(p["start"] * SAMPLE_RATE)), int(round(p["stop"] * SAMPLE_RATE))
            parts.append((clips[p["clip"]][a:b] * np.float32(p["gain"])).astype(np.float32))
    return np.concatenate(parts)


def _feature_signals() -> dict[str, np.ndarray]:
    clips = _clips()
    long = assemble(REF["long_recipe"], clips)
    return {
        "silence": np.zeros(5 * SAMPLE_RATE, dtype=np.float32),
        "short": clips["tone"][8000:9600].copy(),
        "tone": clips["tone"],
        "chirp": clips["chirp"],
        "noise": clips["noise"],
        "bursts": clips["bursts"],
        "exact30": long[: 30 * SAMPLE_RATE].copy(),
        "long": long,
    }


def _stored_frames(n: int) -> np.ndarray:
    return np.unique(np.concatenate([np.arange(min(16, n)), np.arange(0, n, 61), np.arange(max(0, n - 16), n)]))


def _peak_hz(x: np.ndarray, rate: int) -> float:
    spectrum = np.abs(np.fft.rfft(x * np.hanning(x.size)))
    return float(np.fft.rfftfreq(x.size, 1.0 / rate)[np.argmax(spectrum)])


# --------------------------------------------------------------------------- features


def test_long_clip_matches_the_reference_length():
    assert assemble(REF["long_recipe"], _clips()).size == REF["long_samples"]


@pytest.mark.parametrize("key", sorted(REF["features"]["signals"]))
def test_log_mel_matches_whisper_feature_extractor(key):
    expected_all = np.load(FIXTURES / REF["features"]["file"])
    name, bins = key.rsplit("_", 1)
    samples = _feature_signals()[name]
    info = REF["features"]["signals"][key]
    assert samples.size == info["samples"]
    features = log_mel_spectrogram(samples, int(bins), pad_or_trim=samples.size <= 30 * SAMPLE_RATE)
    assert features.dtype == np.float32
    assert features.shape == (int(bins), info["frames"])
    got = features[:, _stored_frames(features.shape[1])]
    np.testing.assert_allclose(got, expected_all[key], rtol=0, atol=1e-4)


def test_short_audio_is_padded_to_30_seconds_and_long_audio_kept_whole():
    x = np.random.default_rng(0).standard_normal(SAMPLE_RATE * 2).astype(np.float32) * 0.1
    assert log_mel_spectrogram(x).shape == (80, N_FRAMES)
    assert log_mel_spectrogram(np.tile(x, 20)[: 31 * SAMPLE_RATE]).shape == (80, N_FRAMES)  # cut to 30 s
    assert log_mel_spectrogram(np.tile(x, 20), pad_or_trim=False).shape == (80, 40 * SAMPLE_RATE // 160)
    # padding is zeros: features of 2 s equal those of the same 2 s followed by explicit silence
    padded = np.concatenate([x, np.zeros(SAMPLE_RATE * 3, np.float32)])
    np.testing.assert_array_equal(log_mel_spectrogram(x), log_mel_spectrogram(padded))


def test_mel_filters_are_slaney_and_cached():
    f80, f128 = mel_filters(80), mel_filters(128)
    assert f80.shape == (80, 201) and f128.shape == (128, 201)
    assert mel_filters(80) is f80
    # Slaney normalisation: each triangle has area 2 / (f_high - f_low); the bank never exceeds ~0.026 for 80 bins
    assert 0.02 < f80.max() < 0.03


def test_numpy_mel_filters_and_resampling_equal_librosa_to_the_bit():
    """The audio extra's code paths without librosa: its filters and its default resampler, bit for bit."""
    librosa = pytest.importorskip("librosa")
    for n_mels in (80, 128):
        want = librosa.filters.mel(
            sr=SAMPLE_RATE, n_fft=400, n_mels=n_mels, fmin=0.0, fmax=SAMPLE_RATE / 2, norm="slaney", dtype=np.float64
        )
        np.testing.assert_array_equal(mel_filters(n_mels), want)
    x = np.random.default_rng(0).standard_normal(3 * 48000 + 17).astype(np.float32)
    for rate in (8000, 22050, 44100, 48000):
        np.testing.assert_array_equal(
            resample(x[: 2 * rate + 5], rate), librosa.resample(x[: 2 * rate + 5], orig_sr=rate, target_sr=SAMPLE_RATE)
        )


def test_without_the_audio_extra_files_say_which_extra_and_arrays_at_16k_still_work(monkeypatch, tmp_path):
    from inference4py.errors import ConfigurationError

    path = tmp_path / "tone.wav"
    sf.write(path, np.zeros(1600, np.float32), 16000)
    monkeypatch.setitem(sys.modules, "soundfile", None)  # import soundfile -> ImportError
    monkeypatch.setitem(sys.modules, "soxr", None)
    with pytest.raises(ConfigurationError, match=re.escape('soundfile package: pip install "inference4py[audio]"')):
        load_audio(path)
    with pytest.raises(ConfigurationError, match=r"Resampling audio from 44100 Hz .* soxr .*inference4py\[audio\]"):
        load_audio((np.zeros(4410, np.float32), 44100))
    samples = load_audio((np.zeros(1600, np.float32), 16000))  # numpy alone
    assert samples.shape == (1600,) and log_mel_spectrogram(samples).shape == (80, N_FRAMES)


def test_the_core_install_carries_no_audio_stack():
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((FIXTURES.parents[1] / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    core = {re.split(r"[<>=\[ ;]", d, maxsplit=1)[0].lower() for d in project["dependencies"]}
    assert not core & {"librosa", "numba", "llvmlite", "scipy", "scikit-learn", "soundfile", "soxr", "torch"}
    audio = {re.split(r"[<>=\[ ;]", d, maxsplit=1)[0].lower() for d in project["optional-dependencies"]["audio"]}
    assert audio == {"soundfile", "soxr"}
    assert "tools" not in project["optional-dependencies"]  # its pins downgrade hub/tokenizers: tools/requirements.txt


# --------------------------------------------------------------------------- loading and resampling


def test_flac_clip_loads_as_float32_16k_mono():
    path = FIXTURES / REF["clips"]["tone"]["file"]
    x = load_audio(path)
    raw, rate = sf.read(str(path), dtype="float32")
    assert rate == SAMPLE_RATE and x.dtype == np.float32
    np.testing.assert_array_equal(x, raw)
    assert load_audio(str(path)).size == REF["clips"]["tone"]["samples"]


@pytest.mark.parametrize("rate", [8000, 22050, 44100, 48000])
def test_resampling_to_16k_keeps_the_tone(rate):
    t = np.arange(int(rate * 1.5)) / rate
    x = (0.4 * np.sin(2 * np.pi * 440.0 * t) + 0.2 * np.sin(2 * np.pi * 2500.0 * t)).astype(np.float32)
    y = load_audio((x, rate))
    import librosa

    np.testing.assert_allclose(y, librosa.resample(x, orig_sr=rate, target_sr=SAMPLE_RATE), atol=1e-6)
    assert abs(y.size - x.size * SAMPLE_RATE / rate) <= 1
    assert abs(_peak_hz(y, SAMPLE_RATE) - 440.0) < 2.0
    # the 2.5 kHz partial survives too (below every Nyquist frequency here)
    spectrum = np.abs(np.fft.rfft(y * np.hanning(y.size)))
    freqs = np.fft.rfftfreq(y.size, 1.0 / SAMPLE_RATE)
    assert abs(freqs[np.argmax(spectrum * (freqs > 1000))] - 2500.0) < 2.0
    np.testing.assert_allclose(resample(x, rate), y)


def test_stereo_file_at_44k_becomes_mono_16k(tmp_path):
    rate = 44100
    t = np.arange(rate) / rate
    left = 0.5 * np.sin(2 * np.pi * 330.0 * t)
    stereo = np.stack([left, left], axis=1).astype(np.float32)  # [frames, channels]
    path = tmp_path / "stereo.wav"
    sf.write(str(path), stereo, rate)
    y = load_audio(path)
    assert y.ndim == 1 and abs(y.size - SAMPLE_RATE) <= 1
    assert abs(_peak_hz(y, SAMPLE_RATE) - 330.0) < 2.0


@pytest.mark.parametrize("fmt,subtype,suffix", [("OGG", "VORBIS", ".ogg"), ("MP3", "MPEG_LAYER_III", ".mp3")])
def test_compressed_formats_load(tmp_path, fmt, subtype, suffix):
    t = np.arange(SAMPLE_RATE) / SAMPLE_RATE
    x = (0.3 * np.sin(2 * np.pi * 440.0 * t)).astype(np.float32)
    path = tmp_path / f"tone{suffix}"
    try:
        sf.write(str(path), x, SAMPLE_RATE, format=fmt, subtype=subtype)
    except Exception as exc:  # libsndfile built without this codec
        pytest.skip(f"soundfile cannot write {fmt}: {exc}")
    y = load_audio(path)
    assert abs(y.size - x.size) < 2000  # codecs may add priming samples
    assert abs(_peak_hz(y, SAMPLE_RATE) - 440.0) < 3.0


def test_arrays_channels_integers():
    rng = np.random.default_rng(1)
    mono = (rng.standard_normal(4000) * 0.1).astype(np.float32)
    two = np.stack([mono, mono])
    np.testing.assert_allclose(load_audio((two, SAMPLE_RATE)), mono, atol=1e-7)  # [channels, samples]
    np.testing.assert_allclose(load_audio((two.T, SAMPLE_RATE)), mono, atol=1e-7)  # [samples, channels]
    pcm = np.array([0, 16384, -32768, 32767], dtype=np.int16)
    np.testing.assert_allclose(load_audio(pcm, sample_rate=SAMPLE_RATE), [0.0, 0.5, -1.0, 32767 / 32768])
    assert load_audio(mono.astype(np.float64), sample_rate=SAMPLE_RATE).dtype == np.float32


# --------------------------------------------------------------------------- errors


def test_empty_audio_is_an_audio_error(tmp_path):
    with pytest.raises(AudioError, match="no samples"):
        load_audio((np.zeros(0, np.float32), SAMPLE_RATE))
    path = tmp_path / "empty.wav"
    sf.write(str(path), np.zeros((0,), np.float32), SAMPLE_RATE)
    with pytest.raises(AudioError, match="no samples"):
        load_audio(path)
    zero_bytes = tmp_path / "zero.flac"
    zero_bytes.write_bytes(b"")
    with pytest.raises(AudioError, match="empty"):
        load_audio(zero_bytes)


def test_unreadable_and_non_audio_files(tmp_path):
    with pytest.raises(AudioError, match="does not exist"):
        load_audio(tmp_path / "missing.wav")
    with pytest.raises(AudioError, match="folder"):
        load_audio(tmp_path)
    text = tmp_path / "notes.wav"
    text.write_text("this is not audio at all\n" * 20, encoding="utf-8")
    with pytest.raises(AudioError, match=r"Cannot read .*notes\.wav as audio"):
        load_audio(text)
    good = tmp_path / "cut.flac"
    sf.write(str(good), np.zeros(SAMPLE_RATE, np.float32), SAMPLE_RATE, format="FLAC")
    truncated = tmp_path / "truncated.flac"
    truncated.write_bytes(good.read_bytes()[:20])  # header cut short
    with pytest.raises(AudioError, match="Cannot read"):
        load_audio(truncated)
    assert issubclass(AudioError, ValueError)


def test_bad_arrays_and_rates():
    with pytest.raises(AudioError, match="sample rate"):
        load_audio(np.zeros(100, np.float32))
    with pytest.raises(AudioError, match="positive integer"):
        load_audio((np.zeros(100, np.float32), 0))
    with pytest.raises(AudioError, match="positive integer"):
        load_audio((np.zeros(100, np.float32), 16000.5))
    with pytest.raises(AudioError, match="NaN"):
        load_audio((np.array([0.0, np.nan], np.float32), SAMPLE_RATE))
    with pytest.raises(AudioError, match="shape"):
        load_audio((np.zeros((2, 2, 10), np.float32), SAMPLE_RATE))
    with pytest.raises(AudioError, match="dtype"):
        load_audio((np.array(["a", "b"]), SAMPLE_RATE))
    with pytest.raises(AudioError, match="Unsupported audio input"):
        load_audio(12345)  # type: ignore[arg-type]
