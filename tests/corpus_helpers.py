"""A small text corpus of the data-preparation tests (test_data_prepare.py,
test_data_corpora.py): seeded files of documents joined by the end-of-text marker, and the
`text` source's config over it with a 300-token BPE."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from training.config import DataConfig

WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu".split()


def write_corpus(folder: Path, n_files: int = 8, docs: int = 40, seed: int = 0) -> Path:
    """`n_files` files f00.txt.. of `docs` documents of 20-200 words each."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    for f in range(n_files):
        parts = [" ".join(rng.choice(WORDS, size=int(rng.integers(20, 200)))) for _ in range(docs)]
        (folder / f"f{f:02d}.txt").write_text("<|endoftext|>".join(parts))
    return folder


def text_config(corpus: Path, **kw) -> DataConfig:
    fields = {"source": "text", "path": str(corpus), "vocab_size": 300}
    return DataConfig.from_dict({**fields, "tokenizer_train_chars": 20000, **kw})
