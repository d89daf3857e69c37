"""Write a pure-Python wheel: a zip with ``*.dist-info``, no build tool needed.

Every file gets one fixed timestamp, so one release gives one wheel, byte for byte.
"""
from __future__ import annotations

import base64
import hashlib
import re
import zipfile
from pathlib import Path

from . import DIST_NAME

__all__ = ["write_wheel", "project_version"]

REPO = Path(__file__).resolve().parent.parent.parent
# A fixed timestamp for every file of the wheel (zip cannot store dates before 1980).
_ZIP_TIME = (2020, 1, 1, 0, 0, 0)


def project_version() -> str:
    """The project's version: ``version = "..."`` in ``pyproject.toml``'s ``[project]`` table.

    Read without ``tomllib``, which Python 3.10 (Gradescope's Ubuntu 22.04, the oldest
    Python the project supports) does not have.

    Raises:
        ValueError: the table or its ``version`` line is not there.
    """
    path = REPO / "pyproject.toml"
    table = re.search(r"^\[project\][ \t]*$(.*?)(?=^\[|\Z)", path.read_text(encoding="utf-8"), re.M | re.S)
    line = table and re.search(r"""^version[ \t]*=[ \t]*["']([^"']+)["'][ \t]*(?:#.*)?$""", table.group(1), re.M)
    if not line:
        raise ValueError(f"{path}: no version = \"...\" line in the [project] table")
    return line.group(1)


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def write_wheel(out: Path, files: dict[str, bytes], chapters: list[str], requirements: list[str]) -> Path:
    """Write ``files`` as a pure-Python wheel in ``out``; return its path."""
    local = ".".join("ch" + c.split("_", 1)[0] for c in chapters)
    version = f"{project_version()}+{local}"
    dist = DIST_NAME.replace("-", "_")
    info_dir = f"{dist}-{version}.dist-info"
    metadata = [
        "Metadata-Version: 2.1",
        f"Name: {DIST_NAME}",
        f"Version: {version}",
        "Summary: The Transformer book, student edition: visible checks of " + ", ".join(chapters)
        + " without the reference answers",
        "Requires-Python: >=3.10",
        *(f"Requires-Dist: {r}" for r in requirements),
    ]
    meta_files = {
        f"{info_dir}/METADATA": ("\n".join(metadata) + "\n").encode(),
        f"{info_dir}/WHEEL": b"Wheel-Version: 1.0\nGenerator: autograder.student.package\n"
                             b"Root-Is-Purelib: true\nTag: py3-none-any\n",
        f"{info_dir}/entry_points.txt": b"[console_scripts]\nautograder = autograder.student.cli:main\n",
        f"{info_dir}/top_level.txt": b"autograder\nsolutions\n",
    }
    everything = {**dict(sorted(files.items())), **meta_files}
    record = [f"{name},{_record_hash(data)},{len(data)}" for name, data in everything.items()]
    record.append(f"{info_dir}/RECORD,,")
    everything[f"{info_dir}/RECORD"] = ("\n".join(record) + "\n").encode()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    wheel = out / f"{dist}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name, data in everything.items():
            entry = zipfile.ZipInfo(name, date_time=_ZIP_TIME)
            entry.external_attr = 0o644 << 16
            entry.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(entry, data)
    return wheel
