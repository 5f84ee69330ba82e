"""Add the corpus's unigram entropy to committed runs.csv files as the column `unigram_entropy`
(nats/token; what `analysis.load` writes from a run's `data_unigram_entropy` param), changing
nothing else: every other column, row and byte stays as it was (checked before writing).

    python -m training.data entropy data.vocab_size=1024       # prints H of that corpus
    python results/unigram_entropy.py H results/demo/runs.csv ...

The column goes where `analysis.load` puts it: after `data_train_tokens`, else after `epochs`,
else after `loss`. A file that has the column already must hold the same value (rerunning is a
no-op).
"""

from __future__ import annotations

import argparse
import csv
import io
import sys
from pathlib import Path

COLUMN = "unigram_entropy"
AFTER = ("data_train_tokens", "epochs", "loss")


def _rows(text: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(text, newline="")))


def _text(rows: list[list[str]], newline: str) -> str:
    out = io.StringIO(newline="")
    csv.writer(out, lineterminator=newline).writerows(rows)
    return out.getvalue()


def with_column(text: str, value: str) -> str:
    """`text` (a CSV) with COLUMN = `value` in every row; ValueError if it has another value."""
    newline = "\r\n" if "\r\n" in text else "\n"
    rows = _rows(text)
    header = rows[0]
    if COLUMN in header:
        i = header.index(COLUMN)
        found = {r[i] for r in rows[1:]}
        if found != {value}:
            raise ValueError(f"column {COLUMN} already holds {sorted(found)}, not {value}")
        return text
    at = next((header.index(c) + 1 for c in AFTER if c in header), len(header))
    new = [r[:at] + [COLUMN if k == 0 else value] + r[at:] for k, r in enumerate(rows)]
    out = _text(new, newline)
    back = [r[:at] + r[at + 1 :] for r in _rows(out)]
    if _text(back, newline) != text:  # the file is not one csv.writer writes back unchanged
        raise ValueError("adding the column would change other bytes of the file")
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("value", help="the entropy as `python -m training.data entropy` prints it")
    parser.add_argument("csv", nargs="+", type=Path)
    args = parser.parse_args(argv)
    try:
        float(args.value)
    except ValueError:
        parser.error(f"value: expected a number (nats/token), got {args.value!r}")
    for path in args.csv:
        try:
            with open(path, newline="") as f:
                text = f.read()
            out = with_column(text, args.value)
            with open(path, "w", newline="") as f:
                f.write(out)
        except (OSError, ValueError) as e:
            print(f"error: {path}: {e}", file=sys.stderr)
            sys.exit(2)
        print(f"{path}: {COLUMN} = {args.value}")


if __name__ == "__main__":
    main()
