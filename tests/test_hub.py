"""inference4py.hub and inference4py.env: file selection, cache resolution, downloads.

No test touches the network: cache tests write a real huggingface_hub cache
layout (tests/hubserver.py: populate_cache), download tests run a fake Hub on
127.0.0.1 (tests/hubserver.py: FakeHub).
"""

from __future__ import annotations

import json
import os
import socket
from fnmatch import fnmatch
from pathlib import Path

import pytest

from inference4py import env, hub
from inference4py.errors import (
    ConfigurationError,
    HubError,
    ModelFilesMissingError,
    ModelNotFoundError,
)
from inference4py.hub import pull, resolve_model_folder, select_model_files
from inference4py.hub.download import _escape_pattern
from tests.hubserver import FakeHub, FakeRepo, populate_cache

# --------------------------------------------------------------------------- realistic listings

TOKENIZER_FILES = ["tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"]

INFERENCE4J_DECODER = [
    ".gitattributes",
    "README.md",
    "config.json",
    "generation_config.json",
    "merges.txt",
    "vocab.json",
    "model.onnx",
    "model.onnx_data",
    *TOKENIZER_FILES,
]

INFERENCE4J_ENCODER_DECODER = [
    ".gitattributes",
    "README.md",
    "config.json",
    "generation_config.json",
    "spiece.model",
    "encoder_model.onnx",
    "decoder_model.onnx",
    "decoder_with_past_model.onnx",
    *TOKENIZER_FILES,
]

OPTIMUM_SEQ2SEQ = [  # optimum-cli export onnx --task text2text-generation-with-past
    "README.md",
    "config.json",
    "generation_config.json",
    "spiece.model",
    "encoder_model.onnx",
    "decoder_model.onnx",
    "decoder_with_past_model.onnx",
    "decoder_model_merged.onnx",
    *TOKENIZER_FILES,
]

OPTIMUM_DECODER_MERGED = [
    "config.json",
    "generation_config.json",
    "vocab.json",
    "merges.txt",
    "chat_template.jinja",
    "decoder_model.onnx",
    "decoder_with_past_model.onnx",
    "decoder_model_merged.onnx",
    "decoder_model_merged.onnx_data",
    *TOKENIZER_FILES,
]

_TJS_SUFFIXES = ["", "_bnb4", "_fp16", "_int8", "_q4", "_q4f16", "_quantized", "_uint8"]
TRANSFORMERS_JS = [  # e.g. onnx-community/Qwen2.5-0.5B-Instruct
    ".gitattributes",
    "README.md",
    "config.json",
    "generation_config.json",
    "merges.txt",
    "vocab.json",
    *TOKENIZER_FILES,
    *[f"onnx/model{s}.onnx" for s in _TJS_SUFFIXES],
    "onnx/model.onnx_data",
    "onnx/model.onnx_data_1",
    "onnx/model_fp16.onnx_data",
]

TRANSFORMERS_JS_WHISPER = [  # e.g. onnx-community/whisper-tiny
    "config.json",
    "generation_config.json",
    "preprocessor_config.json",
    "normalizer.json",
    "added_tokens.json",
    "vocab.json",
    "merges.txt",
    *TOKENIZER_FILES,
    *[
        f"onnx/{base}{s}.onnx"
        for base in ("encoder_model", "decoder_model", "decoder_with_past_model", "decoder_model_merged")
        for s in _TJS_SUFFIXES
    ],
]

GENAI_ROOT = [  # onnxruntime-genai model builder output uploaded as a repo
    "README.md",
    "genai_config.json",
    "model.onnx",
    "model.onnx.data",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "config.json",
]

GENAI_MULTI = [  # e.g. microsoft/Phi-3-mini-4k-instruct-onnx
    "README.md",
    "LICENSE",
    "config.json",
    *[
        f"cpu_and_mobile/cpu-int4-rtn-block-32/{f}"
        for f in (
            "genai_config.json",
            "phi3-mini-4k-instruct-cpu-int4-rtn-block-32.onnx",
            "phi3-mini-4k-instruct-cpu-int4-rtn-block-32.onnx.data",
            "tokenizer.json",
            "tokenizer_config.json",
            "special_tokens_map.json",
            "added_tokens.json",
            "configuration_phi3.py",
        )
    ],
    *[
        f"cuda/cuda-fp16/{f}"
        for f in (
            "genai_config.json",
            "phi3-mini-4k-instruct-cuda-fp16.onnx",
            "phi3-mini-4k-instruct-cuda-fp16.onnx.data",
            "tokenizer.json",
            "tokenizer_config.json",
        )
    ],
]


def test_inference4j_decoder_takes_model_onnx_its_data_and_tokenizer_files():
    assert select_model_files(INFERENCE4J_DECODER) == sorted(
        [
            "config.json",
            "generation_config.json",
            "merges.txt",
            "vocab.json",
            "model.onnx",
            "model.onnx_data",
            *TOKENIZER_FILES,
        ]
    )


def test_inference4j_encoder_decoder_takes_the_three_graphs():
    files = select_model_files(INFERENCE4J_ENCODER_DECODER)
    assert [f for f in files if f.endswith(".onnx")] == [
        "decoder_model.onnx",
        "decoder_with_past_model.onnx",
        "encoder_model.onnx",
    ]
    assert "spiece.model" in files and "README.md" not in files and ".gitattributes" not in files


def test_optimum_seq2seq_prefers_the_merged_decoder():
    files = select_model_files(OPTIMUM_SEQ2SEQ)
    assert [f for f in files if f.endswith(".onnx")] == ["decoder_model_merged.onnx", "encoder_model.onnx"]


def test_optimum_decoder_only_merged_with_external_data():
    files = select_model_files(OPTIMUM_DECODER_MERGED)
    assert "decoder_model_merged.onnx" in files and "decoder_model_merged.onnx_data" in files
    assert "decoder_model.onnx" not in files and "decoder_with_past_model.onnx" not in files
    assert "chat_template.jinja" in files


def test_transformers_js_takes_full_precision_from_onnx_folder_and_no_variant():
    files = select_model_files(TRANSFORMERS_JS)
    onnx = [f for f in files if f.startswith("onnx/")]
    assert onnx == ["onnx/model.onnx", "onnx/model.onnx_data", "onnx/model.onnx_data_1"]
    assert "config.json" in files and "tokenizer.json" in files


@pytest.mark.parametrize("variant", ["fp16", "quantized", "q4", "q4f16", "int8", "uint8", "bnb4"])
def test_transformers_js_variant_selects_that_precision_only(variant):
    onnx = [f for f in select_model_files(TRANSFORMERS_JS, variant=variant) if f.startswith("onnx/")]
    expected = [f"onnx/model_{variant}.onnx"] + (["onnx/model_fp16.onnx_data"] if variant == "fp16" else [])
    assert onnx == expected


def test_fp32_variant_means_full_precision():
    assert select_model_files(TRANSFORMERS_JS, variant="fp32") == select_model_files(TRANSFORMERS_JS)


def test_transformers_js_whisper_encoder_plus_merged_decoder():
    files = select_model_files(TRANSFORMERS_JS_WHISPER, variant="quantized")
    assert [f for f in files if f.endswith(".onnx")] == [
        "onnx/decoder_model_merged_quantized.onnx",
        "onnx/encoder_model_quantized.onnx",
    ]
    assert {"preprocessor_config.json", "normalizer.json", "added_tokens.json"} <= set(files)


def test_genai_root_folder_takes_the_graphs_its_config_names():
    listing = [*GENAI_ROOT, "unrelated_experiment.onnx"]
    config = {"model": {"decoder": {"filename": "model.onnx", "session_options": {}}}, "search": {}}
    files = select_model_files(listing, genai_config=config)
    assert "unrelated_experiment.onnx" not in files
    assert {"genai_config.json", "model.onnx", "model.onnx.data", "tokenizer.json"} <= set(files)
    assert "README.md" not in files


def test_genai_multimodal_config_names_every_graph():
    listing = ["genai_config.json", "vision.onnx", "embedding.onnx", "text.onnx", "text.onnx.data", "old.onnx"]
    config = {
        "model": {
            "vision": {"filename": "vision.onnx"},
            "embedding": {"filename": "embedding.onnx"},
            "decoder": {"filename": "text.onnx"},
        }
    }
    assert select_model_files(listing, genai_config=config) == [
        "embedding.onnx",
        "genai_config.json",
        "text.onnx",
        "text.onnx.data",
        "vision.onnx",
    ]


def test_genai_config_naming_a_missing_graph_is_an_error():
    with pytest.raises(ModelFilesMissingError) as info:
        select_model_files(GENAI_ROOT, genai_config={"model": {"decoder": {"filename": "gone.onnx"}}})
    assert info.value.missing == ["gone.onnx"]


def test_several_genai_folders_need_a_variant():
    with pytest.raises(ModelFilesMissingError, match="variant="):
        select_model_files(GENAI_MULTI)
    files = select_model_files(GENAI_MULTI, variant="cuda-fp16")
    assert files == sorted(
        ["config.json"]
        + [
            f"cuda/cuda-fp16/{f}"
            for f in (
                "genai_config.json",
                "phi3-mini-4k-instruct-cuda-fp16.onnx",
                "phi3-mini-4k-instruct-cuda-fp16.onnx.data",
                "tokenizer.json",
                "tokenizer_config.json",
            )
        ]
    )
    assert select_model_files(GENAI_MULTI, variant="cpu_and_mobile/cpu-int4-rtn-block-32")[1].startswith(
        "cpu_and_mobile/cpu-int4-rtn-block-32/"
    )


def test_no_onnx_at_all_lists_what_was_found_and_how_to_export():
    listing = ["config.json", "model.safetensors", "tokenizer.json"]
    with pytest.raises(ModelFilesMissingError) as info:
        select_model_files(listing)
    message = str(info.value)
    assert "model.safetensors" in message and "model.onnx" in message and "optimum-cli export onnx" in message
    assert isinstance(info.value, ModelNotFoundError)


def test_only_quantized_graphs_suggest_the_variants():
    listing = ["config.json", "onnx/model_quantized.onnx", "onnx/model_q4.onnx"]
    with pytest.raises(ModelFilesMissingError, match=r"Available variants: q4, quantized"):
        select_model_files(listing)


def test_missing_variant_is_an_error():
    with pytest.raises(ModelFilesMissingError, match="variant 'fp16'"):
        select_model_files(INFERENCE4J_DECODER, variant="fp16")


def test_incomplete_encoder_decoder_is_not_a_layout():
    with pytest.raises(ModelFilesMissingError):
        select_model_files(["config.json", "encoder_model.onnx"])


def test_allow_patterns_match_file_names_literally():
    name = "weird[1]*?.onnx"
    assert fnmatch(name, _escape_pattern(name))
    assert not fnmatch("weird1x.onnx", _escape_pattern(name))


# --------------------------------------------------------------------------- local paths


def test_existing_local_folder_is_returned_as_is_without_hub_call(tmp_path, monkeypatch):
    import huggingface_hub

    def explode(*args, **kwargs):
        raise AssertionError("no hub call expected")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", explode)
    assert resolve_model_folder(tmp_path) == tmp_path
    assert resolve_model_folder(str(tmp_path)) == tmp_path


def test_tilde_folder_is_expanded(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "models" / "gpt2").mkdir(parents=True)
    assert resolve_model_folder("~/models/gpt2") == tmp_path / "models" / "gpt2"


@pytest.mark.parametrize("path", ["./nope", "../nope", "/definitely/not/here", "~/nope-model", "a/b/c", "nope/"])
def test_missing_path_is_model_not_found_naming_it(path):
    with pytest.raises(ModelNotFoundError, match="does not exist") as info:
        resolve_model_folder(path)
    assert path in str(info.value)


def test_a_file_is_not_a_model_folder(tmp_path):
    onnx = tmp_path / "model.onnx"
    onnx.write_bytes(b"x")
    with pytest.raises(ModelNotFoundError, match="not a model folder"):
        resolve_model_folder(onnx)


def test_invalid_repo_id_is_model_not_found():
    with pytest.raises(ModelNotFoundError, match="valid Hugging Face repo id"):
        resolve_model_folder("org/bad name")


# --------------------------------------------------------------------------- the populated cache (offline)

DECODER_FILES = {
    "config.json": b'{"model_type": "gpt2"}',
    "tokenizer.json": b"{}",
    "model.onnx": b"onnx-graph",
    "model.onnx_data": b"weights" * 10,
}


def _cache() -> Path:
    return Path(os.environ["HF_HUB_CACHE"])


def test_cached_repo_resolves_offline_to_the_snapshot_folder():
    snapshot = populate_cache(_cache(), "org/name", DECODER_FILES)
    folder = resolve_model_folder("org/name")
    assert folder == snapshot
    assert (folder / "model.onnx").read_bytes() == b"onnx-graph"
    assert folder.is_relative_to(_cache() / "models--org--name" / "snapshots")


def test_revision_pointing_to_a_cached_commit():
    commit = "a" * 40
    old = populate_cache(_cache(), "org/name", DECODER_FILES, commit=commit)
    new = populate_cache(_cache(), "org/name", {**DECODER_FILES, "model.onnx": b"v2"})
    assert resolve_model_folder("org/name") == new
    assert resolve_model_folder("org/name", revision=commit) == old
    (_cache() / "models--org--name" / "refs" / "v1").write_text(commit)
    assert resolve_model_folder("org/name", revision="v1") == old


def test_missing_repo_offline_is_a_hub_error_with_the_pull_hint():
    with pytest.raises(HubError) as info:
        resolve_model_folder("org/absent")
    message = str(info.value)
    assert "Model 'org/absent' is not in the local Hugging Face cache" in message
    assert str(_cache()) in message
    assert "HF_HUB_OFFLINE=1" in message
    assert "`inference4py pull org/absent`" in message and "model_path(" in message


def test_missing_revision_offline_names_it_in_the_pull_hint():
    populate_cache(_cache(), "org/name", DECODER_FILES)
    with pytest.raises(HubError, match=r"inference4py pull org/name --revision v9"):
        resolve_model_folder("org/name", revision="v9")


def test_inference4py_offline_alias(monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setenv("INFERENCE4PY_OFFLINE", "true")
    with pytest.raises(HubError, match=r"INFERENCE4PY_OFFLINE=true"):
        resolve_model_folder("org/absent")


def test_incomplete_cached_snapshot_is_reported():
    populate_cache(_cache(), "org/name", {"config.json": b"{}", "encoder_model.onnx": b"x"})
    with pytest.raises(HubError, match="incomplete") as info:
        resolve_model_folder("org/name")
    assert "inference4py pull org/name" in str(info.value)


def test_dangling_blob_of_an_interrupted_download_counts_as_missing():
    snapshot = populate_cache(_cache(), "org/name", DECODER_FILES)
    (snapshot / "model.onnx").resolve().unlink()
    with pytest.raises(HubError, match="incomplete"):
        resolve_model_folder("org/name")


def test_cached_variant_is_checked():
    populate_cache(_cache(), "org/tjs", {"config.json": b"{}", "onnx/model.onnx": b"x"})
    assert resolve_model_folder("org/tjs").name != "onnx"  # configs live at the root
    with pytest.raises(HubError, match="--variant fp16"):
        resolve_model_folder("org/tjs", variant="fp16")


def test_cached_genai_subfolder_resolves_to_that_folder():
    config = json.dumps({"model": {"decoder": {"filename": "phi3-mini-4k-instruct-cuda-fp16.onnx"}}}).encode()
    files = {f: b"x" for f in GENAI_MULTI}
    files["cuda/cuda-fp16/genai_config.json"] = config
    files["cpu_and_mobile/cpu-int4-rtn-block-32/genai_config.json"] = b"{}"
    snapshot = populate_cache(_cache(), "org/genai", files)
    assert resolve_model_folder("org/genai", variant="cuda-fp16") == snapshot / "cuda" / "cuda-fp16"


def test_pull_offline_returns_the_cached_snapshot():
    snapshot = populate_cache(_cache(), "org/name", DECODER_FILES)
    assert pull("org/name") == snapshot


# --------------------------------------------------------------------------- downloads from a fake Hub


def _tjs_repo() -> dict[str, bytes]:
    files = {name: f"bytes of {name}".encode() for name in TRANSFORMERS_JS}
    files["onnx/model.onnx_data"] = os.urandom(3000)
    return files


def test_download_fetches_only_the_chosen_layout(online):
    repo = _tjs_repo()
    with FakeHub({"org/tjs": repo}) as hub:
        folder = resolve_model_folder("org/tjs", endpoint=hub.url, progress=False)
    expected = set(select_model_files(TRANSFORMERS_JS))
    assert hub.downloaded("org/tjs") == expected
    assert {"onnx/model.onnx_data", "onnx/model.onnx_data_1"} <= expected  # external data comes along
    assert not any("quantized" in f or "fp16" in f or "README" in f for f in hub.downloaded("org/tjs"))
    on_disk = {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}
    assert on_disk == expected
    assert (folder / "onnx" / "model.onnx_data").read_bytes() == repo["onnx/model.onnx_data"]
    assert folder.parent == _cache() / "models--org--tjs" / "snapshots"


def test_download_then_offline_is_served_from_the_cache(online, monkeypatch):
    repo = {name: f"bytes of {name}".encode() for name in INFERENCE4J_DECODER}
    with FakeHub({"inference4j/gpt2": repo}) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)  # read at call time
        folder = resolve_model_folder("inference4j/gpt2", progress=False)
        assert (folder / "model.onnx_data").read_bytes() == b"bytes of model.onnx_data"
        before = len(hub.requests)
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
        assert resolve_model_folder("inference4j/gpt2") == folder
        assert len(hub.requests) == before
        monkeypatch.delenv("HF_HUB_OFFLINE")
        assert resolve_model_folder("inference4j/gpt2", local_files_only=True) == folder
        assert len(hub.requests) == before


def test_second_online_call_does_not_download_again(online):
    with FakeHub({"org/m": {"config.json": b"{}", "model.onnx": b"g" * 500}}) as hub:
        first = resolve_model_folder("org/m", endpoint=hub.url, progress=False)
        gets = [r for r in hub.requests if r[0] == "GET" and "/resolve/" in r[1]]
        assert resolve_model_folder("org/m", endpoint=hub.url, progress=False) == first
        assert [r for r in hub.requests if r[0] == "GET" and "/resolve/" in r[1]] == gets


def test_download_variant(online):
    with FakeHub({"org/tjs": _tjs_repo()}) as hub:
        resolve_model_folder("org/tjs", endpoint=hub.url, variant="q4", progress=False)
        assert {f for f in hub.downloaded("org/tjs") if f.endswith(".onnx")} == {"onnx/model_q4.onnx"}


def test_download_genai_subfolder_takes_what_its_config_names(online):
    files = {f: f"bytes of {f}".encode() for f in GENAI_MULTI}  # distinct blobs: equal ones are fetched once
    files["cuda/cuda-fp16/genai_config.json"] = json.dumps(
        {"model": {"decoder": {"filename": "phi3-mini-4k-instruct-cuda-fp16.onnx"}}}
    ).encode()
    files["cuda/cuda-fp16/draft.onnx"] = b"not named by the config"
    with FakeHub({"org/phi3": files}) as hub:
        folder = resolve_model_folder("org/phi3", endpoint=hub.url, variant="cuda-fp16", progress=False)
        assert folder.name == "cuda-fp16"
        assert "cuda/cuda-fp16/draft.onnx" not in hub.downloaded("org/phi3")
        assert "cuda/cuda-fp16/phi3-mini-4k-instruct-cuda-fp16.onnx.data" in hub.downloaded("org/phi3")
        assert not any(f.startswith("cpu_and_mobile/") for f in hub.downloaded("org/phi3"))


def test_unknown_repo_is_model_not_found(online):
    from huggingface_hub.errors import RepositoryNotFoundError

    with FakeHub({}) as hub, pytest.raises(ModelNotFoundError, match="not found on the Hugging Face Hub") as info:
        resolve_model_folder("org/missing", endpoint=hub.url)
    assert "token" in str(info.value)
    assert isinstance(info.value.__cause__, RepositoryNotFoundError)


def test_unknown_revision_is_model_not_found(online):
    with FakeHub({"org/m": {"model.onnx": b"x"}}) as hub, pytest.raises(ModelNotFoundError, match="Revision 'v9'"):
        resolve_model_folder("org/m", endpoint=hub.url, revision="v9")


def test_gated_repo_explains_license_and_token(online):
    with (
        FakeHub({"org/gated": FakeRepo({"model.onnx": b"x"}, gated=True)}) as hub,
        pytest.raises(HubError, match="accept its license") as info,
    ):
        resolve_model_folder("org/gated", endpoint=hub.url, token=False)
    assert "HF_TOKEN" in str(info.value)


def test_repo_without_onnx_lists_what_it_holds(online):
    with FakeHub({"org/torch": {"config.json": b"{}", "model.safetensors": b"w"}}) as hub:
        with pytest.raises(ModelFilesMissingError, match="model.safetensors"):
            resolve_model_folder("org/torch", endpoint=hub.url)
        assert hub.downloaded("org/torch") == set()


def _closed_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def test_unreachable_hub_falls_back_to_the_cache(online):
    snapshot = populate_cache(_cache(), "org/name", DECODER_FILES)
    assert resolve_model_folder("org/name", endpoint=_closed_port_url()) == snapshot


def test_unreachable_hub_without_cache_names_the_problem(online):
    with pytest.raises(HubError, match="cannot be reached") as info:
        resolve_model_folder("org/absent", endpoint=_closed_port_url())
    assert "inference4py pull org/absent" in str(info.value)


def test_pull_downloads_with_the_chosen_layout(online):
    with FakeHub({"org/m": {"config.json": b"{}", "model.onnx": b"g", "README.md": b"r"}}) as hub:
        folder = pull("org/m", endpoint=hub.url)
        assert sorted(p.name for p in folder.iterdir()) == ["config.json", "model.onnx"]


# --------------------------------------------------------------------------- env


def test_env_offline(monkeypatch):
    assert env.offline() and env.offline_setting() == "HF_HUB_OFFLINE=1"
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    assert not env.offline()
    monkeypatch.setenv("INFERENCE4PY_OFFLINE", "yes")
    assert env.offline()


def test_env_cache_follows_hf_variables(monkeypatch, tmp_path):
    assert env.hf_hub_cache() == Path(os.environ["HF_HUB_CACHE"])
    monkeypatch.delenv("HF_HUB_CACHE")
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    assert env.hf_hub_cache() == tmp_path / "hub"


def test_env_endpoint(monkeypatch):
    monkeypatch.delenv("HF_ENDPOINT", raising=False)
    assert env.hf_endpoint() is None
    monkeypatch.setenv("HF_ENDPOINT", "https://mirror.example/")
    assert env.hf_endpoint() == "https://mirror.example"


def test_env_num_threads(monkeypatch):
    monkeypatch.delenv("INFERENCE4PY_NUM_THREADS", raising=False)
    assert env.default_num_threads() is None
    monkeypatch.setenv("INFERENCE4PY_NUM_THREADS", " 4 ")
    assert env.default_num_threads() == 4
    for bad in ("0", "-2", "four", "1.5"):
        monkeypatch.setenv("INFERENCE4PY_NUM_THREADS", bad)
        with pytest.raises(ConfigurationError, match="INFERENCE4PY_NUM_THREADS"):
            env.default_num_threads()


def test_env_providers(monkeypatch):
    monkeypatch.delenv("INFERENCE4PY_PROVIDERS", raising=False)
    assert env.default_providers() is None
    monkeypatch.setenv("INFERENCE4PY_PROVIDERS", "CUDAExecutionProvider, CPUExecutionProvider")
    assert env.default_providers() == ["CUDAExecutionProvider", "CPUExecutionProvider"]
    monkeypatch.setenv("INFERENCE4PY_PROVIDERS", "CUDAExecutionProvider,,CPUExecutionProvider")
    with pytest.raises(ConfigurationError, match="empty provider name"):
        env.default_providers()


def test_local_model_folder_never_goes_to_the_hub(tmp_path):
    assert hub.local_model_folder(tmp_path) == tmp_path
    with pytest.raises(ModelNotFoundError, match="does not exist.*model id"):
        hub.local_model_folder("org/name")
    with pytest.raises(ModelNotFoundError, match="not a model folder"):
        (tmp_path / "f").write_text("x")
        hub.local_model_folder(tmp_path / "f")
