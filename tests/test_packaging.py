"""What ``pip`` gets: the sdist carries the library and the C sources that build its compiled
extensions, and no tests (they need the repository: interop/, golden data, a JVM); a wheel
built from that sdist has the extensions, the type stubs and the Spark log profile; the
project's metadata names its license and dependencies once each."""

from __future__ import annotations

import subprocess
import sys
import tarfile
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.one_codec  # packaging, not records


def test_metadata_lists_each_dependency_once_and_the_license() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = [d.split(">")[0].split("=")[0].split("<")[0].strip() for d in project["dependencies"]]
    assert len(names) == len(set(names)) and "pyarrow" in names
    assert "pyarrow" not in " ".join(project["optional-dependencies"]["spark"])
    assert project["license"] == "Apache-2.0" and (ROOT / "LICENSE").is_file()
    assert "hypothesis" in " ".join(project["optional-dependencies"]["testing"])


@pytest.mark.slow
def test_sdist_builds_a_wheel_with_the_compiled_extensions(tmp_path: Path) -> None:
    subprocess.run([sys.executable, "-m", "build", "--sdist", "-o", str(tmp_path), str(ROOT)],
                   check=True, capture_output=True, timeout=600)  # fmt: skip
    (sdist,) = tmp_path.glob("kafkalog-*.tar.gz")
    with tarfile.open(sdist) as tar:
        names = [n.split("/", 1)[1] for n in tar.getnames() if "/" in n]
    assert not [n for n in names if n.startswith(("tests/", "bench/", "interop/"))]
    for source in ("src/kafkalog/records/_fastcodec.c", "src/kafkalog/records/_v2_format.h",
                   "src/kafkalog/records/_codec_state.h",
                   "src/kafkalog/records/_record_objects.c",
                   "src/kafkalog/records/_record_encode.c",
                   "src/kafkalog/records/_batch_search.c",
                   "src/kafkalog/records/_record_objects.h",
                   "src/kafkalog/cleaner/_keymap.c", "src/kafkalog/cleaner/_pagein.c",
                   "LICENSE", "README.md"):  # fmt: skip
        assert source in names, source
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                    "-w", str(tmp_path), str(sdist)], check=True, capture_output=True,
                   timeout=600)  # fmt: skip
    (wheel,) = tmp_path.glob("kafkalog-*.whl")
    files = zipfile.ZipFile(wheel).namelist()
    for module in ("records/_fastcodec", "cleaner/_keymap", "cleaner/_pagein"):
        assert any(f.startswith(f"kafkalog/{module}.") and f.endswith(".so") for f in files)
        assert f"kafkalog/{module}.pyi" in files
    assert "kafkalog/spark/log4j2-quiet.properties" in files and "kafkalog/py.typed" in files


def test_every_public_method_of_the_api_has_a_docstring() -> None:
    """``help(kafkalog.Log)`` and an IDE show something for every method of what ``kafkalog``
    exports; properties are exempt (their names are Kafka's accessors')."""
    import inspect

    import kafkalog

    missing = []
    for name in kafkalog.__all__:
        obj = getattr(kafkalog, name)
        members = vars(obj).items() if inspect.isclass(obj) else [(name, obj)]
        for attr, member in members:
            if attr.startswith("_") or isinstance(member, property):
                continue
            fn = getattr(member, "__func__", member)
            if inspect.isfunction(fn) and not (fn.__doc__ or "").strip():
                missing.append(f"{name}.{attr}" if attr != name else name)
    assert not missing
