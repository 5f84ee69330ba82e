"""Prepare a corpus ahead of training, with a progress bar, so that a sweep's jobs find its
token cache built instead of racing to build it:

    python -m training.data prepare data=text data.path=/data/fineweb-edu
    python -m training.data prepare data=tokens data.path='/data/fineweb10B/*.bin'
    python -m training.data entropy data.vocab_size=1024   # prepare, then its unigram entropy

`entropy` prints the unigram entropy of the corpus's training tokens (nats per token, the loss
of a model that learnt only token frequencies; kept in the cache's meta.json), which every run
logs as the param `data_unigram_entropy`.

Takes the training command line's data overrides (and paths.cache_dir); the cache it builds is
the one `python -m training.train` with the same overrides reads. data=tokens is only checked
(headers, largest id) and fingerprinted: its shards are read in place.
"""

from __future__ import annotations

import sys
import time

from training.cli import check_composes
from training.config import SECTIONS, ConfigError
from training.data import filehash
from training.data.cache import prepare_data
from training.data.fingerprint import source_fingerprint
from training.paths import PROJECT_ROOT, default_cache_dir, resolve_dir
from training.spec import preflight_data

USAGE = (
    "usage: python -m training.data {prepare,entropy} data=NAME [data.FIELD=VALUE ...] "
    "[paths.cache_dir=DIR]"
)


def prepare(argv: list[str]) -> str:
    """Prepare the corpus the overrides `argv` name; returns a one-line summary."""
    fingerprint, tokens, seconds = _prepared(argv)
    n_train, n_val = len(tokens.train), len(tokens.val)
    return (
        f"prepared {fingerprint}: {n_train:,} train + {n_val:,} val tokens "
        f"(vocab {tokens.vocab_size}) in {tokens.cache_dir}, {seconds:.1f} s"
    )


def entropy(argv: list[str]) -> str:
    """Prepare the corpus (or find it prepared) and name its unigram entropy in one line."""
    fingerprint, tokens, _ = _prepared(argv)
    h = tokens.unigram_entropy
    shown = "undefined (no training tokens)" if h is None else f"{h:.6f} nats/token"
    n = len(tokens.train)
    over = (
        f"both sides of its {n:,} training pairs"
        if tokens.meta.get("kind") == "pairs"
        else (f"its {n:,} training tokens")
    )
    return f"unigram entropy of {fingerprint}: {shown} over {over} (vocab {tokens.vocab_size})"


def _prepared(argv: list[str]):
    """(source fingerprint, the prepared TokenData, seconds it took) of the overrides `argv`."""
    from hydra import compose, initialize_config_dir  # ~0.3 s, this command only
    from omegaconf import OmegaConf

    check_composes(PROJECT_ROOT / "conf", "config", argv)
    with initialize_config_dir(str(PROJECT_ROOT / "conf"), version_base="1.3"):
        cfg = OmegaConf.to_container(compose("config", overrides=argv), resolve=True)
    # the training command line: every section is checked, not only the data it prepares
    data = {name: cls.from_dict(cfg.get(name)) for name, cls in SECTIONS.items()}["data"]
    cache_root = resolve_dir((cfg.get("paths") or {}).get("cache_dir"), default_cache_dir())
    preflight_data(data, cache_root)
    filehash.use_cache_dir(cache_root)  # its fingerprints too, not the default cache
    t0 = time.perf_counter()
    fingerprint = source_fingerprint(data)
    tokens = prepare_data(data, cache_root, progress=sys.stderr.isatty())
    return fingerprint, tokens, time.perf_counter() - t0


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    commands = {"prepare": prepare, "entropy": entropy}
    if "-h" in argv or "--help" in argv:  # overrides are key=value: never a flag
        print(f"{USAGE}\n\n{__doc__.strip()}")
        return
    if not argv or argv[0] not in commands:
        print(USAGE, file=sys.stderr)
        sys.exit(2)
    try:
        print(commands[argv[0]](argv[1:]), flush=True)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
