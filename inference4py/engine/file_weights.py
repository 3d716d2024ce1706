"""A graph whose weights are another file's bytes, used in place (a GGUF file on the compiled operators).

Such a folder holds :data:`RECORD`: the file's path, size and modification time when the graph was
written. onnxruntime reads external data relative to one folder, and refuses a location that
leaves it (symlinks resolved), so the session is created from the graph's bytes with that folder
set as the external-data folder: the initializers are then the file's pages, mapped, not copied.
A file changed or moved since is refused here with the fix, never read at stale offsets.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from inference4py.errors import ModelLoadError

__all__ = ["RECORD", "WeightsFile", "record_weights_file", "weights_file"]

RECORD = "inference4py-weights.json"
FOLDER_CONFIG = "session.model_external_initializers_file_folder_path"


@dataclass(frozen=True)
class WeightsFile:
    """The file a graph's external data points into."""

    path: Path
    size: int
    mtime_ns: int

    @classmethod
    def of(cls, path: Path) -> WeightsFile:
        stat = path.stat()
        return cls(path.resolve(), stat.st_size, stat.st_mtime_ns)

    def unchanged(self) -> bool:
        try:
            return WeightsFile.of(self.path) == self
        except OSError:
            return False


def record_weights_file(folder: Path, source: Path) -> None:
    """Note in ``folder`` that its graph's weights are ``source``'s bytes."""
    weights = WeightsFile.of(source)
    record = {"file": str(weights.path), "size": weights.size, "mtime_ns": weights.mtime_ns}
    (folder / RECORD).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")


def weights_file(graph: Path, *, check: bool = True) -> WeightsFile | None:
    """The file ``graph``'s weights are, when its folder says so (None for an ordinary folder).

    Raises:
        ModelLoadError: with ``check``, the file changed, moved or is gone since the graph was written.
    """
    path = graph.parent / RECORD
    if not path.is_file():
        return None
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
        weights = WeightsFile(Path(record["file"]), int(record["size"]), int(record["mtime_ns"]))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ModelLoadError(f"{path} is damaged ({exc}): delete {graph.parent} and convert the model again.") from exc
    if check and not weights.unchanged():
        what = "is gone or moved" if not os.path.exists(weights.path) else "changed"
        raise ModelLoadError(
            f"The model file {weights.path}, whose bytes are the weights of {graph.parent}, {what} since it was "
            "converted: load the model file again (inference4py converts it again, in seconds), or restore it."
        )
    return weights
