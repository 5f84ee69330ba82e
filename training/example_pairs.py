"""An offline seq2seq corpus from the running Python's standard library: each public function
or method with a docstring gives one pair, source = its docstring's first line, target = its
`def` line (name and parameters, as `ast.unparse` writes them):

    {"source": "Return the number of bits set in x.", "target": "def bit_count(x)"}

Deterministic for a given stdlib (files in path order, definitions in source order; a pair
repeated verbatim is kept once), so it is fingerprinted by the stdlib it was read from: another
Python version gives other pairs and so other run keys. Used by `data.source=stdlib
data.kind=pairs` (conf/data/stdlib_pairs.yaml) directly, or written as JSONL for
`data.source=text data.kind=pairs`:

    python -m training.example_pairs pairs.jsonl   # ~15k pairs, a few seconds
"""

from __future__ import annotations

import argparse
import ast
import functools
import json
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

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
    from training.data import stdlib_files

    seen: set[tuple[str, str]] = set()
    out = []
    for rel, path in stdlib_files():
        for source, target in file_pairs(path.read_text(encoding="utf-8", errors="replace")):
            if (source, target) not in seen:
                seen.add((source, target))
                out.append((f"{rel}#{len(out)}", source, target))
    return tuple(out)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="the JSONL file to write")
    parser.add_argument("--limit", type=int, default=None, help="the first LIMIT pairs only")
    args = parser.parse_args(argv)
    pairs = stdlib_pairs()[: args.limit]
    with open(args.out, "w", encoding="utf-8") as f:
        for _, source, target in pairs:
            f.write(json.dumps({"source": source, "target": target}, ensure_ascii=False) + "\n")
    print(f"{len(pairs)} pairs from Python {sys.version.split()[0]}'s stdlib -> {args.out}")


if __name__ == "__main__":
    main()
