"""The stdlib's seq2seq pairs: each public function or method with a docstring gives one pair,
source = its docstring's first line, target = its `def` line (name and parameters, as
`ast.unparse` writes them). Deterministic for a given stdlib (files in path order, definitions
in source order; a pair repeated verbatim is kept once), so it is fingerprinted by the stdlib
it was read from. `python -m training.example_pairs pairs.jsonl` writes them as JSONL.
"""

from __future__ import annotations

import ast
import functools
import warnings
from collections.abc import Iterator

from training.data.sources import stdlib_files

EXAMPLE_FORMAT = 1  # bump when the rule that derives pairs changes (it enters the fingerprint)
MAX_SOURCE_CHARS = 200  # a "first line" longer than this is a paragraph that was not wrapped


def file_pairs(code: str) -> Iterator[tuple[str, str]]:
    """(docstring's first line, `def` line) of every public function in `code`."""
    with warnings.catch_warnings():  # old stdlib modules hold invalid escape sequences
        warnings.simplefilter("ignore")
        try:
            tree = ast.parse(code)
        except SyntaxError:  # lib2to3's fixtures and the like: not this Python's syntax
            return
    for node in ast.walk(tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        if node.name.startswith("_"):
            continue
        doc = ast.get_docstring(node)
        first = doc.strip().splitlines()[0].strip() if doc and doc.strip() else ""
        if not first or len(first) > MAX_SOURCE_CHARS:
            continue
        prefix = "async def" if isinstance(node, ast.AsyncFunctionDef) else "def"
        yield first, f"{prefix} {node.name}({ast.unparse(node.args)})"


@functools.cache  # ~5 s of parsing; a sweep resolves and loads it in one process
def stdlib_pairs() -> tuple[tuple[str, str, str], ...]:
    """(key, source, target) of the stdlib's pairs, key = file path and pair number."""
    seen: set[tuple[str, str]] = set()
    out = []
    for rel, path in stdlib_files():
        for source, target in file_pairs(path.read_text(encoding="utf-8", errors="replace")):
            if (source, target) not in seen:
                seen.add((source, target))
                out.append((f"{rel}#{len(out)}", source, target))
    return tuple(out)
