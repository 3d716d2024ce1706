"""push: a model folder to a Hub repo through the real huggingface_hub client, against the fake Hub
of tests/hubserver.py (create_repo, preupload, LFS batch + PUT, commit), then pulled back."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import inference4py.publish
from inference4py import OnnxTextGenerator, push, resolve_checkpoint
from inference4py.cli.app import main
from inference4py.errors import HubError, ModelFilesMissingError, ModelNotFoundError, UnsupportedModelError
from tests.hubserver import FakeHub

FIXTURE = Path(__file__).parent / "fixtures" / "models" / "gpt2"
TOKEN = "hf_write_token"


@pytest.fixture
def hub(online, monkeypatch):
    import huggingface_hub.constants
    import huggingface_hub.file_download

    # huggingface_hub >= 1.0 uploads through Xet whenever hf_xet is installed; the fake Hub speaks LFS (as a
    # Hub without Xet storage does), so Xet is turned off, as HF_HUB_DISABLE_XET=1 does
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_DISABLE_XET", True, raising=False)
    with FakeHub(tokens={TOKEN}) as server:
        monkeypatch.setenv("HF_ENDPOINT", server.url)  # read at call time by push and resolve_checkpoint
        # huggingface_hub froze HF_ENDPOINT at import (its CommitInfo parses the commit URL against it):
        # as if it had been set before
        monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", server.url)
        template = server.url + "/{repo_id}/resolve/{revision}/{filename}"
        monkeypatch.setattr(huggingface_hub.constants, "HUGGINGFACE_CO_URL_TEMPLATE", template)
        monkeypatch.setattr(
            huggingface_hub.file_download, "HUGGINGFACE_CO_URL_TEMPLATE", template, raising=False
        )  # < 1.0
        yield server


def _files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def _sha256(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


def _snapshot(hub: FakeHub, repo_id: str, revision: str | None = None, token: str | None = TOKEN) -> Path:
    from huggingface_hub import snapshot_download

    return Path(snapshot_download(repo_id, revision=revision, token=token, endpoint=hub.url))


def test_push_then_pull_round_trips_the_folder_byte_for_byte(hub):
    result = push(FIXTURE, "me/tiny-gpt2", token=TOKEN)
    assert result.revision == "main" and len(result.commit) == 40
    pulled = _files(_snapshot(hub, "me/tiny-gpt2"))
    card = pulled.pop("README.md").decode()
    assert pulled == _files(FIXTURE)
    assert result.files == tuple(sorted([*_files(FIXTURE), "README.md"]))
    # one commit; the graph went through LFS (a binary sample), the JSON files as regular files
    [(repo, branch, sent)] = hub.commits
    kinds = dict((path, kind) for kind, path in sent)
    assert (repo, branch) == ("me/tiny-gpt2", "main")
    assert kinds["model.onnx"] == "lfsFile" and kinds["config.json"] == "file"
    assert [path for method, path in hub.requests if method == "PUT"] == [f"/lfs/{_sha256(FIXTURE / 'model.onnx')}"]
    assert 'OnnxTextGenerator.builder().model_id("me/tiny-gpt2").build()' in card
    assert "library_name: inference4py" in card


def test_the_card_lists_each_file_with_its_sha256(hub):
    import hashlib

    push(FIXTURE, "me/tiny-gpt2", token=TOKEN)
    card = (_snapshot(hub, "me/tiny-gpt2") / "README.md").read_text()
    for name, data in _files(FIXTURE).items():
        assert f"| `{name}` | {len(data)} | `{hashlib.sha256(data).hexdigest()}` |" in card


def test_a_pushed_model_loads_back_by_repo_id_and_generates_the_same_ids(hub):
    push(FIXTURE, "me/tiny-gpt2", token=TOKEN)
    folder = resolve_checkpoint("me/tiny-gpt2", None, TOKEN)
    assert folder != FIXTURE and (folder / "model.onnx").read_bytes() == (FIXTURE / "model.onnx").read_bytes()
    with OnnxTextGenerator.builder().model_path(FIXTURE).max_new_tokens(8).build() as local:
        expected = local.generate("Hello there").token_ids
    builder = OnnxTextGenerator.builder().model_id("me/tiny-gpt2").token(TOKEN).max_new_tokens(8)
    with builder.build() as remote:
        assert remote.generate("Hello there").token_ids == expected


def test_a_branch_push_leaves_main_and_loads_by_revision(hub, tmp_path):
    push(FIXTURE, "me/tiny-gpt2", token=TOKEN)
    changed = tmp_path / "gpt2"
    shutil.copytree(FIXTURE, changed)
    config = json.loads((changed / "generation_config.json").read_text())
    (changed / "generation_config.json").write_text(json.dumps({**config, "max_new_tokens": 3}))
    result = push(changed, "me/tiny-gpt2", revision="short", token=TOKEN)
    assert result.revision == "short"
    on_branch = resolve_checkpoint("me/tiny-gpt2", "short", TOKEN)
    on_main = resolve_checkpoint("me/tiny-gpt2", token=TOKEN)
    assert (on_branch / "generation_config.json").read_bytes() == (changed / "generation_config.json").read_bytes()
    assert (on_main / "generation_config.json").read_bytes() == (FIXTURE / "generation_config.json").read_bytes()
    assert '.revision("short")' in (_snapshot(hub, "me/tiny-gpt2", "short") / "README.md").read_text()


def test_a_private_repo_is_created_private_and_needs_the_token(hub):
    push(FIXTURE, "me/secret", private=True, token=TOKEN)
    assert hub.repos["me/secret"].private
    with pytest.raises(ModelNotFoundError, match="private"):
        resolve_checkpoint("me/secret", token=False)
    assert (resolve_checkpoint("me/secret", token=TOKEN) / "model.onnx").is_file()


def test_a_folder_readme_is_kept(hub, tmp_path):
    folder = tmp_path / "gpt2"
    shutil.copytree(FIXTURE, folder)
    (folder / "README.md").write_text("my own card\n")
    push(folder, "me/tiny-gpt2", token=TOKEN)
    assert (_snapshot(hub, "me/tiny-gpt2") / "README.md").read_text() == "my own card\n"


def test_a_bad_token_is_a_hub_error_naming_the_fix(hub):
    with pytest.raises(HubError, match="refused the token.*HF_TOKEN"):
        push(FIXTURE, "me/tiny-gpt2", token="hf_wrong")
    assert "me/tiny-gpt2" not in hub.repos


def test_a_token_that_may_not_write_there_is_a_hub_error(online, monkeypatch):
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_DISABLE_XET", True, raising=False)
    with FakeHub(tokens={TOKEN}, namespaces={TOKEN: {"me"}}) as server:
        with pytest.raises(HubError, match="may not write to 'someone-else/model' .HTTP 403"):
            push(FIXTURE, "someone-else/model", token=TOKEN, endpoint=server.url)
        assert "someone-else/model" not in server.repos


def test_no_token_at_all_is_refused_the_same_way(hub):
    with pytest.raises(HubError, match="HTTP 401"):
        push(FIXTURE, "me/tiny-gpt2", token=False)


def test_a_missing_repo_is_model_not_found(hub):
    with pytest.raises(ModelNotFoundError, match="was not found on the Hugging Face Hub"):
        resolve_checkpoint("me/never-pushed", token=TOKEN)


def test_a_folder_that_is_not_a_model_is_refused_before_any_request(hub, tmp_path):
    (tmp_path / "notes.txt").write_text("hello")
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ModelFilesMissingError, match="not a model folder inference4py loads"):
        push(tmp_path, "me/notes", token=TOKEN)
    with pytest.raises(ModelNotFoundError, match="does not exist"):
        push(tmp_path / "missing", "me/notes", token=TOKEN)
    with pytest.raises(ModelNotFoundError, match="user/name"):
        push(FIXTURE, "no-namespace", token=TOKEN)
    assert hub.requests == []


def test_weights_used_in_place_from_another_file_are_refused(hub, tmp_path):
    folder = tmp_path / "gguf"
    shutil.copytree(FIXTURE, folder)
    (folder / "inference4py-weights.json").write_text(json.dumps({"file": "/models/x.gguf", "size": 1, "mtime_ns": 1}))
    with pytest.raises(UnsupportedModelError, match="x.gguf in place.*INFERENCE4PY_GGML_OPS=0"):
        push(folder, "me/gguf", token=TOKEN)


def test_a_converted_folder_card_names_its_source_digest_and_converter(tmp_path):
    folder = tmp_path / "converted"
    shutil.copytree(FIXTURE, folder)
    marker = {"source": "/models/tiny.gguf", "sha256": "ab" * 32, "architecture": "gpt2", "converter": 5}
    (folder / "inference4py-gguf.json").write_text(json.dumps(marker))
    card = inference4py.publish.model_card(folder, "me/tiny", revision="main")
    assert "converted from a GGUF file" in card
    assert f"source digest (sha256): `{'ab' * 32}`" in card
    assert "source: `/models/tiny.gguf`" in card and "converter version: `5`" in card


def test_cli_push(hub, capsys):
    code = main(["push", str(FIXTURE), "me/cli-gpt2", "--token", TOKEN, "--revision", "dev", "--private"])
    assert code == 0
    out = capsys.readouterr().out
    assert "me/cli-gpt2@dev" in out
    assert hub.repos["me/cli-gpt2"].private
    assert _files(_snapshot(hub, "me/cli-gpt2", "dev")).keys() == {*_files(FIXTURE), "README.md"}


def test_cli_push_of_a_bad_folder_exits_2_with_the_message(hub, tmp_path, capsys):
    assert main(["push", str(tmp_path), "me/x", "--token", TOKEN]) == 2
    assert "not a model folder" in capsys.readouterr().err


def test_a_converted_whisper_folder_is_pushed_with_its_provenance(hub, tmp_path):
    import hashlib

    from inference4py.speech.files import convert_whisper
    from inference4py.speech.files.convert import CONVERTER_VERSION

    folder = convert_whisper(FIXTURE.parent / "whisper-ct2", tmp_path / "whisper")
    push(folder, "me/whisper-ct2", token=TOKEN)
    pulled = _snapshot(hub, "me/whisper-ct2")
    card = (pulled / "README.md").read_text()
    marker = json.loads((folder / "inference4py-whisper.json").read_text())
    assert "converted from a Whisper file" in card and "(speech" in card
    assert (
        f"source digest (sha256): `{marker['sha256']}`" in card and f"converter version: `{CONVERTER_VERSION}`" in card
    )
    assert 'WhisperSpeechModel.builder().model_id("me/whisper-ct2").build()' in card
    for name, data in _files(folder).items():
        assert (pulled / name).read_bytes() == data, name
        assert hashlib.sha256(data).hexdigest() in card


def test_a_gguf_conversion_is_pushed_when_it_holds_its_weights(hub, tmp_path):
    pytest.importorskip("gguf")
    from inference4py.converted import file_digest
    from inference4py.engine.kernels import kernel_library
    from inference4py.gguf.convert import CONVERTER_VERSION, convert_gguf
    from tests.gguf.test_convert import write_gguf

    source = write_gguf(tmp_path / "tiny-llama.gguf", "model-llama-Q8_0.gguf", "tokenizer-llama.gguf")
    if kernel_library().available:  # the default conversion reads the file's bytes in place: not pushable
        in_place = convert_gguf(source, tmp_path / "in-place")
        with pytest.raises(UnsupportedModelError, match="tiny-llama.gguf in place"):
            push(in_place, "me/tiny-llama-q8", token=TOKEN)
    folder = convert_gguf(source, tmp_path / "converted", bits=32)  # float32: the folder holds its weights
    push(folder, "me/tiny-llama-q8", token=TOKEN)
    card = (_snapshot(hub, "me/tiny-llama-q8") / "README.md").read_text()
    assert "converted from a GGUF file" in card and f"source digest (sha256): `{file_digest(source)}`" in card
    assert f"converter version: `{CONVERTER_VERSION}`" in card
    with OnnxTextGenerator.builder().model_path(folder).max_new_tokens(6).build() as local:
        expected = local.generate("Hello").token_ids
    with OnnxTextGenerator.builder().model_id("me/tiny-llama-q8").token(TOKEN).max_new_tokens(6).build() as remote:
        assert remote.generate("Hello").token_ids == expected
