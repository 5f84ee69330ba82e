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
import json
import sys
from pathlib import Path

from training.data.stdlib_pairs import EXAMPLE_FORMAT, file_pairs, stdlib_pairs

__all__ = ["EXAMPLE_FORMAT", "file_pairs", "main", "stdlib_pairs"]


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
