"""Prepare a corpus ahead of training, with a progress bar, so that a sweep's jobs find its
token cache built instead of racing to build it:

    python -m training.data prepare data=text data.path=/data/fineweb-edu
    python -m training.data prepare data=tokens data.path='/data/fineweb10B/*.bin'

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
    "usage: python -m training.data prepare data=NAME [data.FIELD=VALUE ...] [paths.cache_dir=DIR]"
)


def prepare(argv: list[str]) -> str:
    """Prepare the corpus the overrides `argv` name; returns a one-line summary."""
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
    n_train, n_val = len(tokens.train), len(tokens.val)
    return (
        f"prepared {fingerprint}: {n_train:,} train + {n_val:,} val tokens "
        f"(vocab {tokens.vocab_size}) in {tokens.cache_dir}, {time.perf_counter() - t0:.1f} s"
    )


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] != "prepare":
        print(USAGE, file=sys.stderr)
        sys.exit(2)
    try:
        print(prepare(argv[1:]), flush=True)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
