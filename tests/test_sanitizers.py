"""The compiled loops under AddressSanitizer and UndefinedBehaviorSanitizer.

Why: a C loop that reads a byte past its buffer, or shifts a negative number left, can pass
every differential test with one compiler and go wrong with the next; the sanitizers stop it at
the first such step. This builds every extension that setup.py declares with both sanitizers
into a copy of the package and runs, on the compiled codec only, the tests that drive each
compiled loop: the differential properties, the scanner's framing, the Record objects and the
cleaner's rules. Refuses: to run without the sanitizer runtimes (it skips, naming the missing one).
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DRIVEN = [
    "tests/test_fastpath.py",
    "tests/test_scanner.py",
    "tests/test_record_objects.py",
    "tests/test_cleaner_rules.py",
    "tests/test_fastcompact.py",
]
PYTEST = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider"]
FLAGS = [
    "-shared",
    "-fPIC",
    "-O1",
    "-g",
    "-std=c11",
    "-fno-omit-frame-pointer",
    "-fsanitize=address,undefined",
    "-fno-sanitize-recover=undefined",  # the first finding fails the run
]


def _extensions() -> list[tuple[str, list[str], list[str]]]:
    """(module, sources, include dirs) of each Extension(...) in setup.py, as written there."""
    tree = ast.parse((ROOT / "setup.py").read_text())
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Extension":
            name, sources = (ast.literal_eval(arg) for arg in node.args[:2])
            keywords = {k.arg: k.value for k in node.keywords}
            includes = keywords.get("include_dirs")
            found.append((name, sources, ast.literal_eval(includes) if includes else []))
    return found


def _runtime(name: str) -> str:
    path = subprocess.run(
        ["gcc", f"-print-file-name={name}"], capture_output=True, text=True, check=False
    ).stdout.strip()
    if not os.path.isabs(path):
        pytest.skip(f"gcc has no {name} here: the sanitizers cannot run")
    return path


@pytest.mark.one_codec
@pytest.mark.timeout(900)
def test_the_compiled_loops_run_clean_under_asan_and_ubsan(tmp_path: Path) -> None:
    if shutil.which("gcc") is None:
        pytest.skip("no gcc: the sanitizers cannot run")
    preload = f"{_runtime('libasan.so')} {_runtime('libubsan.so')}"
    copy = tmp_path / "src"
    shutil.copytree(
        ROOT / "src", copy, ignore=shutil.ignore_patterns("*.so", "__pycache__", "*.egg-info")
    )
    include = sysconfig.get_paths()["include"]
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    extensions = _extensions()
    assert {name for name, _, _ in extensions} >= {
        "kafkalog.records._fastcodec",
        "kafkalog.cleaner._keymap",
    }
    for name, sources, includes in extensions:
        target = copy.joinpath(*name.split("."))
        built = subprocess.run(
            ["gcc", *FLAGS, f"-I{include}", *(f"-I{ROOT / d}" for d in includes)]
            + [str(ROOT / s) for s in sources]
            + ["-o", f"{target}{suffix}"],
            capture_output=True,
            text=True,
            check=False,
        )
        assert built.returncode == 0, built.stderr
    env = dict(
        os.environ,
        LD_PRELOAD=preload,
        ASAN_OPTIONS="detect_leaks=0:allocator_may_return_null=1",
        PYTHONMALLOC="malloc",  # every object through ASan's allocator
        PYTHONPATH=str(copy),
        KAFKALOG_EXAMPLES="60",
        KAFKALOG_REQUIRE_FAST="1",
        KAFKALOG_PURE_PYTHON="0",
    )
    where = subprocess.run(
        [sys.executable, "-c", "import kafkalog.records._fastcodec as f; print(f.__file__)"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert where.stdout.startswith(str(copy)), where.stdout  # the sanitized build is the one run
    run = subprocess.run(
        [*PYTEST, "-k", "not reference", *DRIVEN],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=840,
    )
    assert run.returncode == 0, (run.stdout[-3000:], run.stderr[-3000:])
