"""Share a model folder on the Hugging Face Hub, then load it back by repo id.

python examples/push_pull.py FOLDER me/my-model --token hf_...             # huggingface.co
HF_ENDPOINT=http://127.0.0.1:8080 python examples/push_pull.py ...          # a private Hub

The folder is pushed as one commit with a model card (README.md); the model is then loaded from
the repo (downloaded into the Hugging Face cache) and answers as the local folder does.
"""

import argparse

from inference4py import OnnxTextGenerator, push, resolve_checkpoint


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("folder", help="a model folder (converted, fused, quantized or exported)")
    parser.add_argument("repo_id", help="user/name or org/name; created if missing")
    parser.add_argument("--token", default=None, help="a write token (default: HF_TOKEN or the saved login)")
    parser.add_argument("--revision", default=None, help="the branch to push to (default main)")
    parser.add_argument("--private", action="store_true")
    parser.add_argument("--prompt", default="Hello")
    args = parser.parse_args()

    result = push(args.folder, args.repo_id, private=args.private, revision=args.revision, token=args.token)
    print(f"pushed {len(result.files)} files to {result.repo_id}@{result.revision}, commit {result.commit}")

    folder = resolve_checkpoint(args.repo_id, revision=result.commit, token=args.token)
    print(f"pulled into {folder}")
    with OnnxTextGenerator.builder().model_path(args.folder).max_new_tokens(8).build() as local:
        expected = local.generate(args.prompt).token_ids
    builder = OnnxTextGenerator.builder().model_id(args.repo_id).revision(result.commit).max_new_tokens(8)
    if args.token:
        builder = builder.token(args.token)
    with builder.build() as remote:
        answer = remote.generate(args.prompt)
    print(f"same ids as the local folder: {answer.token_ids == expected}  ({answer.text!r})")


if __name__ == "__main__":
    main()
