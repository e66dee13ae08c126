"""The shape of the tree, checked: layers, sans-IO records, module size, module headers."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src" / "kafkalog"
MODULES = sorted(p for p in SRC.rglob("*.py"))


def test_import_linter_contracts_are_kept() -> None:
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    assert exe is not None, "import-linter is a dev dependency"
    result = subprocess.run(
        [exe], check=False, capture_output=True, text=True, cwd=SRC.parent.parent
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "broken" in result.stdout and "0 broken" in result.stdout


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(SRC)))
def test_module_budget_and_header(path: Path) -> None:
    text = path.read_text()
    assert len(text.splitlines()) <= 600, f"{path.name} is over 600 lines: extract a collaborator"
    doc = ast.get_docstring(ast.parse(text))
    assert doc, f"{path.name} must open with why it exists and what it refuses to do"


def test_no_time_or_os_calls_in_records() -> None:
    for path in (SRC / "records").glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom):
                names = (
                    [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module]
                )
                for name in names:
                    assert name not in {"os", "time", "mmap", "io", "logging"}, (path, name)


@pytest.mark.parametrize(
    "path",
    sorted([*SRC.rglob("*.c"), *SRC.rglob("*.h")]),
    ids=lambda p: str(p.relative_to(SRC)),
)
def test_c_module_budget(path: Path) -> None:
    assert len(path.read_text().splitlines()) <= 600, f"{path.name} is over 600 lines"


def test_import_kafkalog_loads_no_heavy_dependency() -> None:
    """The storage engine must start without Arrow, Spark or the CLI's libraries; they load
    where they are used (to_arrow/from_arrow, kafkalog.spark, the command)."""
    code = (
        "import sys, kafkalog\n"
        "heavy = ('pyarrow', 'pyspark', 'click', 'rich', 'kio', 'asyncio')\n"
        "print(','.join(m for m in heavy if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True
    ).stdout.strip()
    assert out == "", f"`import kafkalog` loaded {out}"


ROOT = SRC.parent.parent
DOCS = [ROOT / "docs" / "architecture.md"]


def test_the_architecture_page_names_only_files_that_exist_and_every_package() -> None:
    """docs/architecture.md is true to the tree: each file it names in backticks exists (a
    bare name somewhere under src/kafkalog; a path from the package or the repository), and
    its layer table names every package."""
    import re

    names = {p.name for p in SRC.rglob("*") if p.is_file()}
    for doc in DOCS:
        text = doc.read_text()
        for found in re.findall(r"`([\w./]+\.(?:py|c|h|pyi))`", text):
            if "/" not in found:
                assert found in names, f"{doc.name} names {found}, which is no file of the package"
            else:
                assert (SRC / found).exists() or (ROOT / found).exists(), (
                    f"{doc.name} names {found}, which does not exist"
                )
        packages = sorted(p.parent.name for p in SRC.glob("*/__init__.py"))
        missing = [p for p in packages if f"`kafkalog.{p}`" not in text]
        assert not missing, f"{doc.name} omits the package(s) {missing}"
