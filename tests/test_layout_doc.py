"""docs/layout.md against the tree: every package and module named, nothing named that is gone.

The page's convention (stated at its top): a path is written whole from the repository root in
backticks, a module as `training/data/cache.py`, a package or folder with a trailing slash.
"""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAYOUT = ROOT / "docs" / "layout.md"
# The code folders whose every package and module the page must name.
CODE_ROOTS = ("models", "training", "sweeps", "analysis", "benchmarks", "hydra_plugins")
# A backticked repository path: a .py file, or a folder written with its trailing slash.
PATH = re.compile(r"`(\.?[A-Za-z0-9_][A-Za-z0-9_./-]*(?:\.py|/))`")


def named_paths() -> set[str]:
    return set(PATH.findall(LAYOUT.read_text()))


def code_roots() -> set[str]:
    """The named code folders, and any other top-level package (a new one is checked too)."""
    packages = {d.name for d in ROOT.iterdir() if (d / "__init__.py").is_file()}
    return (set(CODE_ROOTS) | packages) - {"tests"}


def code_paths() -> set[str]:
    """Every module (`.py` file other than `__init__.py`) and package (`pkg/`) of the code roots."""
    found = set()
    for root in code_roots():
        for path in (ROOT / root).rglob("*.py"):
            if "__pycache__" in path.parts:
                continue
            rel = path.relative_to(ROOT)
            if path.name == "__init__.py":
                found.add(f"{rel.parent.as_posix()}/")
            else:
                found.add(rel.as_posix())
    return found


def test_every_package_and_module_is_named_in_layout_md():
    code = code_paths()
    assert "models/" in code and "training/train.py" in code  # the walk found the tree
    missing = sorted(code - named_paths())
    assert not missing, (
        f"docs/layout.md does not name {len(missing)} package(s)/module(s); add one table row "
        "each (`path` | one line of what it is):\n  " + "\n  ".join(missing)
    )


def test_every_path_named_in_layout_md_exists():
    stale = sorted(p for p in named_paths() if not (ROOT / p).exists())
    assert not stale, (
        f"docs/layout.md names {len(stale)} path(s) that do not exist; remove or rename them:\n  "
        + "\n  ".join(stale)
    )


def test_the_parser_reads_paths_and_only_paths():
    # Whole paths and packages with their slash are read; a bare file name is read too, so the
    # existence check catches it (it is not a path from the root). Placeholders and dotted
    # module names are prose, not paths.
    text = "`models/lm.py`, `training/data/`, `lm.py`, `runs/<run_key>/`, `analysis.fit`, `.ci/`"
    assert set(PATH.findall(text)) == {"models/lm.py", "training/data/", "lm.py", ".ci/"}
