"""Build the voice activity detection fixtures in tests/fixtures/vad/ (tests/speech/test_vad.py).

```
apt-get install -y espeak-ng
pip install faster-whisper          # a separate venv is fine: --system-site-packages keeps ours visible
python tools/vad_reference.py                 # clips + model + reference
python tools/vad_reference.py --only reference
```

Steps (``--only``, repeatable):

* ``clips``: two English sentences spoken by espeak-ng (voice en-us, 150 words/min),
  resampled 22.05 -> 16 kHz (librosa / soxr), written as 16-bit mono FLAC:
  ``speech-a.flac``, ``speech-b.flac``.
* ``model``: faster-whisper's bundled Silero VAD, ``faster_whisper/assets/silero_vad_v6.onnx``
  (the "sequence" export: inputs input/h/c), copied as ``silero_vad_v6.onnx`` with the
  MIT licences of Silero VAD and faster-whisper in ``LICENSE``.
* ``reference``: the test recording (:func:`compose`: 1 s of noise, clip A, 20 s of noise,
  clip B, 3 s of noise; white noise of RMS 0.001 from seed 0 over all of it), its speech
  probabilities from faster-whisper's ``SileroVADModel`` and its regions from
  faster-whisper's ``get_speech_timestamps`` under several option sets, in ``reference.json``.

``--silero-data DIR`` (the ``silero_vad/data`` folder of the ``silero-vad`` wheel, e.g. from
``pip download --no-deps silero-vad``) adds a check that needs no fixture: the library's
streaming runner on ``silero_vad.onnx`` (inputs input/state/sr, one window per run) must give
the same probabilities as its sequence runner on ``silero_vad_16k_sequence.onnx`` of the same
release (they were equal to the last bit with silero-vad 6.2.3).

The tests rebuild the recording with their own copy of :func:`compose` from the recipe
stored in the JSON; the library and the tests never import faster-whisper.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "fixtures" / "vad"
RATE = 16000
CLIPS = {
    "speech-a": "Voice activity detection finds the parts of a recording that hold speech.",
    "speech-b": "After a long silence, the second speaker talks about the weather tomorrow.",
}
RECIPE = {"lead_s": 1.0, "gap_s": 20.0, "tail_s": 3.0, "noise_rms": 0.001, "seed": 0}
# option sets compared with faster-whisper: its defaults, Silero's defaults, a 5 s cap that forces cuts
OPTION_SETS = {
    "faster_whisper_defaults": {},
    "silero_defaults": {"min_speech_duration_ms": 250, "min_silence_duration_ms": 100, "speech_pad_ms": 30},
    "max_speech_2s": {"min_silence_duration_ms": 100, "speech_pad_ms": 30, "max_speech_duration_s": 2.0},
    "no_padding": {"speech_pad_ms": 0},
}

SILERO_LICENSE = """MIT License

Copyright (c) 2020-present Silero Team

Permission is hereby granted, free of charge, to any person obtaining a copy
of this software and associated documentation files (the "Software"), to deal
in the Software without restriction, including without limitation the rights
to use, copy, modify, merge, publish, distribute, sublicense, and/or sell
copies of the Software, and to permit persons to whom the Software is
furnished to do so, subject to the following conditions:

The above copyright notice and this permission notice shall be included in all
copies or substantial portions of the Software.

THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR
IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY,
FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE
AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER
LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM,
OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE
SOFTWARE.
"""


def compose(a: np.ndarray, b: np.ndarray, recipe: dict) -> tuple[np.ndarray, list[tuple[int, int]]]:
    """The test recording and where the clips sit in it (the same function is in test_vad.py)."""
    lead, gap, tail = (int(recipe[k] * RATE) for k in ("lead_s", "gap_s", "tail_s"))
    audio = np.zeros(lead + a.size + gap + b.size + tail, dtype=np.float32)
    audio[lead : lead + a.size] = a
    b_start = lead + a.size + gap
    audio[b_start : b_start + b.size] = b
    rng = np.random.default_rng(recipe["seed"])
    audio += (rng.standard_normal(audio.size) * recipe["noise_rms"]).astype(np.float32)
    return audio, [(lead, lead + a.size), (b_start, b_start + b.size)]


def read_clip(name: str) -> np.ndarray:
    import soundfile

    data, rate = soundfile.read(OUT / f"{name}.flac", dtype="float32")
    assert rate == RATE, rate
    return data


def build_clips() -> None:
    import librosa
    import soundfile

    espeak = shutil.which("espeak-ng")
    if espeak is None:
        raise SystemExit("espeak-ng is not installed: `apt-get install -y espeak-ng`, then rerun.")
    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for name, text in CLIPS.items():
            raw = Path(tmp) / f"{name}.wav"
            subprocess.run([espeak, "-v", "en-us", "-s", "150", "-w", str(raw), text], check=True)
            data, rate = soundfile.read(raw, dtype="float32")
            data = librosa.resample(data, orig_sr=rate, target_sr=RATE, res_type="soxr_vhq")
            soundfile.write(OUT / f"{name}.flac", data, RATE, subtype="PCM_16")
            print(f"{name}.flac: {data.size / RATE:.2f} s")


def build_model() -> None:
    from faster_whisper.utils import get_assets_path

    OUT.mkdir(parents=True, exist_ok=True)
    source = Path(get_assets_path()) / "silero_vad_v6.onnx"
    shutil.copyfile(source, OUT / "silero_vad_v6.onnx")
    import faster_whisper

    fw_license = _faster_whisper_license()
    (OUT / "LICENSE").write_text(
        "silero_vad_v6.onnx: the Silero VAD model (https://github.com/snakers4/silero-vad) as bundled in\n"
        f"faster-whisper {faster_whisper.__version__} (faster_whisper/assets/silero_vad_v6.onnx), copied by\n"
        "tools/vad_reference.py. Both are MIT licensed:\n\n" + SILERO_LICENSE + "\n" + fw_license,
        encoding="utf-8",
    )
    print(f"silero_vad_v6.onnx: {source.stat().st_size} bytes from {source}")


def _faster_whisper_license() -> str:
    from importlib.metadata import distribution

    dist = distribution("faster-whisper")
    for file in dist.files or []:
        if file.name.upper().startswith("LICENSE"):
            return Path(dist.locate_file(file)).read_text(encoding="utf-8")
    raise SystemExit("faster-whisper's LICENSE file was not found in its installation")


def build_reference() -> None:
    import faster_whisper
    from faster_whisper.vad import VadOptions, get_speech_timestamps, get_vad_model

    a, b = read_clip("speech-a"), read_clip("speech-b")
    audio, placed = compose(a, b, RECIPE)
    padded = np.pad(audio, (0, -audio.size % 512))  # whole windows, as the library pads
    probabilities = get_vad_model()(padded.copy())
    regions = {}
    for name, options in OPTION_SETS.items():
        found = get_speech_timestamps(audio.copy(), VadOptions(**options))
        regions[name] = {"options": options, "regions": [[r["start"], r["end"]] for r in found]}
        print(name, [(round(s / RATE, 2), round(e / RATE, 2)) for s, e in regions[name]["regions"]])
    model = OUT / "silero_vad_v6.onnx"
    reference = {
        "generator": "tools/vad_reference.py",
        "faster_whisper": faster_whisper.__version__,
        "model_sha256": hashlib.sha256(model.read_bytes()).hexdigest(),
        "sample_rate": RATE,
        "clips": CLIPS,
        "recipe": RECIPE,
        "clip_positions": placed,
        "num_samples": int(audio.size),
        "probabilities": [round(float(p), 6) for p in np.asarray(probabilities).reshape(-1)],
        "regions": regions,
    }
    (OUT / "reference.json").write_text(json.dumps(reference, indent=1) + "\n", encoding="utf-8")
    print(f"reference.json: {len(reference['probabilities'])} windows")


def crosscheck(silero_data: Path) -> None:
    from inference4py.speech.vad import SileroVad, VadOptions

    audio, _ = compose(read_clip("speech-a"), read_clip("speech-b"), RECIPE)
    streaming = SileroVad(silero_data / "silero_vad.onnx")
    sequence = SileroVad(silero_data / "silero_vad_16k_sequence.onnx")
    assert (streaming.layout, sequence.layout) == ("streaming", "sequence")
    difference = np.abs(streaming.speech_probabilities(audio) - sequence.speech_probabilities(audio)).max()
    print(f"silero-vad streaming vs sequence: max probability difference {difference:.2e}")
    options = VadOptions(speech_pad_ms=0)
    print("regions:", streaming.speech_regions(audio, options), sequence.speech_regions(audio, options))
    if difference > 1e-5:
        raise SystemExit("the streaming and sequence runners disagree")


STEPS = {"clips": build_clips, "model": build_model, "reference": build_reference}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", action="append", choices=sorted(STEPS), help="run only this step (repeatable)")
    parser.add_argument("--silero-data", type=Path, help="silero-vad's data folder: cross-check the two runners")
    args = parser.parse_args()
    for name in args.only or list(STEPS):
        STEPS[name]()
    if args.silero_data:
        crosscheck(args.silero_data)


if __name__ == "__main__":
    main()
