"""Two things every part of the grader does with files: hash one, and write one whole."""

import hashlib
import os
from pathlib import Path


def file_hash(path: Path) -> str:
    """SHA-256 of a file's bytes, in hex."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def write_atomically(path: Path, data: str | bytes) -> None:
    """Write ``data`` (text as UTF-8, or bytes) to ``path`` whole or not at all: a reader
    (another worker, a run started again after an interruption) sees the old file or the
    new one, never half of one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_bytes(data.encode("utf-8") if isinstance(data, str) else data)
    os.replace(temporary, path)
