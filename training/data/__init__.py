"""Corpora, tokenizers, token caches and batch sampling.

- sources: documents as (key, text) streams (stdlib, site-packages, .txt/.jsonl, Hugging Face)
- fingerprint, filehash: the corpus as the run key sees it, hashed once, then checked by stats
- tokenizer: byte-level BPE or bytes
- cache, store: the prepared token cache (streamed build, lock, atomic publish, integrity)
- shards: pre-tokenized shards (data.source=tokens: llm.c .bin, .npy), memory-mapped
- pairs, stdlib_pairs: paired corpora for encoder_decoder
- batches: validation windows, the training BatchSampler and its Prefetcher
- `python -m training.data prepare data=...`: build a cache ahead of a sweep (__main__)
"""

from training.data.batches import BatchSampler, Prefetcher, val_pairs, val_windows
from training.data.cache import (
    CACHE_FORMAT,
    Corpus,
    TokenData,
    cache_key,
    load_corpus,
    prepare_data,
    split_documents,
    split_stream,
)
from training.data.filehash import file_sha256, hash_files
from training.data.fingerprint import source_fingerprint
from training.data.pairs import PairCorpus, PairSplit, load_pairs, read_jsonl_pairs, split_pairs
from training.data.shards import ShardedTokens, open_shard, write_bin
from training.data.sources import (
    SITEPACKAGES_MAX_FILE_BYTES,
    STDLIB_EXCLUDED_DIRS,
    installed_packages,
    sitepackages_files,
    stdlib_files,
    text_files,
)
from training.data.store import _verified, cache_problem
from training.data.tokenizer import EOT, BPETokenizer, ByteTokenizer, load_tokenizer

__all__ = [
    "CACHE_FORMAT",
    "EOT",
    "SITEPACKAGES_MAX_FILE_BYTES",
    "STDLIB_EXCLUDED_DIRS",
    "BatchSampler",
    "Prefetcher",
    "BPETokenizer",
    "ByteTokenizer",
    "PairCorpus",
    "PairSplit",
    "ShardedTokens",
    "TokenData",
    "Corpus",
    "load_corpus",
    "_verified",
    "cache_key",
    "cache_problem",
    "file_sha256",
    "hash_files",
    "installed_packages",
    "load_pairs",
    "load_tokenizer",
    "open_shard",
    "prepare_data",
    "read_jsonl_pairs",
    "sitepackages_files",
    "source_fingerprint",
    "split_documents",
    "split_pairs",
    "split_stream",
    "stdlib_files",
    "text_files",
    "val_pairs",
    "val_windows",
    "write_bin",
]
