"""Tokenizers: a byte-level BPE trained on a bounded sample of the training split, or raw
UTF-8 bytes. Both encode a batch of documents to one flat id array (documents joined by the
end-of-text id); the BPE runs on every core (the tokenizers library's batch parallelism)."""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np

log = logging.getLogger("training.data")

EOT = "<|endoftext|>"
BYTE_EOT_ID = 0  # byte tokenizer: NUL separates documents (absent from text corpora)


class ByteTokenizer:
    """UTF-8 bytes as ids 0..255; NUL (0) doubles as the end-of-text separator."""

    vocab_size = 256
    eot_id = BYTE_EOT_ID

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [list(t.encode("utf-8", "replace")) for t in texts]

    def encode_flat(self, texts: list[str], dtype) -> tuple[np.ndarray, list[int]]:
        """(every text's ids followed by end-of-text, in order; each text's id count)."""
        data = [t.encode("utf-8", "replace") for t in texts]
        flat = np.frombuffer(b"\0".join(data) + b"\0", dtype=np.uint8).astype(dtype)
        return flat, [len(d) + 1 for d in data]

    def decode(self, ids: list[int]) -> str:
        return bytes(ids).decode("utf-8", "replace")


def bpe_sample(texts: Iterable[str], max_chars: int) -> Iterator[str]:
    """The texts a BPE is trained on: the first `max_chars` characters of `texts`, read no
    further."""
    budget = max_chars
    for t in texts:
        if budget <= 0:
            log.info("BPE trained on the first %d training characters", max_chars)
            return
        yield t[:budget]
        budget -= len(t)


def sample_key(texts: Iterable[str], vocab_size: int, max_chars: int) -> tuple[str, int]:
    """(a sha256 of what a BPE trained on `texts` depends on, the sample's characters): the
    sample's texts (each one's length and characters: the trainer splits words within a text),
    the vocabulary size and the tokenizers library's version. Equal keys train equal
    tokenizers, so one trained before is reused (training.data.build)."""
    import tokenizers

    h, chars = hashlib.sha256(), 0
    h.update(json.dumps(["bpe", vocab_size, tokenizers.__version__]).encode())
    for t in bpe_sample(texts, max_chars):
        data = t.encode("utf-8", "surrogatepass")
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
        chars += len(t)
    return h.hexdigest()[:32], chars


LONG_TEXT_CHARS = 1 << 19  # a longer text is encoded in pieces of about PIECE_CHARS
PIECE_CHARS = 1 << 18
# characters encoded in one call: the library's Encoding objects of a call are alive together,
# ~150 bytes a token (a 4M-character call of the PostScript manual above held ~580 MB)
GROUP_CHARS = 1 << 18
_SAFE_CUT = re.compile(r"(?<=\S)\n(?=\S)")


def pieces(text: str) -> list[str]:
    """`text` cut into pieces of about PIECE_CHARS, each cut just after a newline that has a
    non-space character on both sides: the byte-level pre-tokenizer (GPT-2's pattern) makes
    that newline a word of its own, so the words, the BPE's tokens and its training counts are
    those of the whole text. The tokenizers library's memory grows with a text's length (~200
    bytes per character: a 9 MB log file took 1.8 GB); in pieces it is bounded by the batch.
    Python's whitespace includes every character the library's pattern calls whitespace, so a
    cut is never inside one of its words. A text without such a newline stays whole."""
    if len(text) <= LONG_TEXT_CHARS:
        return [text]
    out, start = [], 0
    while len(text) - start > LONG_TEXT_CHARS:
        m = _SAFE_CUT.search(text, start + PIECE_CHARS)
        if m is None:
            break
        out.append(text[start : m.end()])
        start = m.end()
    out.append(text[start:])
    return out


def _groups(texts: list[str], max_chars: int) -> Iterator[list[str]]:
    """Consecutive runs of `texts` of at most `max_chars` characters (or one text)."""
    group, size = [], 0
    for t in texts:
        if group and size + len(t) > max_chars:
            yield group
            group, size = [], 0
        group.append(t)
        size += len(t)
    if group:
        yield group


class BPETokenizer:
    """A byte-level BPE `tokenizers.Tokenizer` with `<|endoftext|>` as a special token."""

    def __init__(self, tok):
        self.tok = tok
        self.vocab_size = tok.get_vocab_size()
        self.eot_id = tok.token_to_id(EOT)

    @classmethod
    def train(cls, texts: Iterable[str], vocab_size: int, max_chars: int) -> BPETokenizer:
        """Trained on the first `max_chars` characters of `texts` (read no further)."""
        from tokenizers import ByteLevelBPETokenizer

        tok = ByteLevelBPETokenizer()
        tok.train_from_iterator(
            (p for t in bpe_sample(texts, max_chars) for p in pieces(t)),  # the same counts
            vocab_size=vocab_size,
            min_frequency=2,
            special_tokens=[EOT],
            show_progress=False,
        )
        return cls(tok._tokenizer)

    @classmethod
    def load(cls, path: Path) -> BPETokenizer:
        from tokenizers import Tokenizer

        return cls(Tokenizer.from_file(str(path)))

    def save(self, path: Path) -> None:
        self.tok.save(str(path))

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [e.ids for e in self.tok.encode_batch(texts)]

    def encode_flat(self, texts: list[str], dtype) -> tuple[np.ndarray, list[int]]:
        """(every text's ids followed by end-of-text, in order; each text's id count)."""
        cut = [pieces(t) for t in texts]
        parts = [p for c in cut for p in c]
        # each piece's ids as an array at once: Python lists of ints hold ~36 bytes a token (a
        # 12.7M-character PostScript manual, 9.4M tokens, took 700 MB), an array 2 or 4
        ids = []
        for group in _groups(parts, GROUP_CHARS):  # no offsets: ~2x faster
            ids += [np.asarray(e.ids, dtype=dtype) for e in self.tok.encode_batch_fast(group)]
        eot = np.array([self.eot_id], dtype=dtype)
        pieces_of = iter(ids)
        joined, lengths = [], []
        for c in cut:  # a long text's pieces joined again, then its end-of-text
            text_ids = [next(pieces_of) for _ in c]
            joined += [*text_ids, eot]
            lengths.append(sum(map(len, text_ids)) + 1)
        flat = np.concatenate(joined) if joined else np.empty(0, dtype=dtype)
        return flat, lengths

    def decode(self, ids: list[int]) -> str:
        return self.tok.decode(ids)


def load_tokenizer(cache: Path):
    meta = json.loads((cache / "meta.json").read_text())
    return (
        ByteTokenizer()
        if meta["tokenizer"] == "byte"
        else BPETokenizer.load(cache / "tokenizer.json")
    )
