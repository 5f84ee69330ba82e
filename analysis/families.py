"""Model families in the analysis: losses of different objectives are not comparable.

A decoder's next-token loss, an encoder's masked-LM loss (on 15% of its tokens) and an
encoder-decoder's span-corruption loss measure different things, so one scaling law over runs
of several families (or a comparison of their losses) means nothing. Each run's family is read
from its `arch` tag: non-decoder families lead with theirs (`models.ModelConfig.arch`,
`encoder-post-layernorm-...`); a decoder's arch names no family. Fit one law per family with
`--group family`.
"""

from __future__ import annotations

import pandas as pd

from analysis.load import InputError

FAMILIES = ("decoder", "encoder_decoder", "encoder")


def family_of(arch: str) -> str:
    """The family an arch signature names (``decoder`` when it names none)."""
    head = str(arch).split("-", 1)[0]
    return head if head in FAMILIES else "decoder"


def with_family(runs: pd.DataFrame) -> pd.DataFrame:
    """`runs` with a `family` column (from `arch`; every run a decoder where there is none)."""
    if "family" in runs.columns:
        return runs
    families = runs["arch"].map(family_of) if "arch" in runs.columns else "decoder"
    return runs.assign(family=families)


def check_one_family(runs: pd.DataFrame, what: str, hint: str) -> None:
    """InputError (one line) when `runs` mixes families: their losses are not comparable."""
    families = sorted(with_family(runs)["family"].astype(str).unique())
    if len(families) > 1:
        raise InputError(
            f"{what} holds model families {families}: one scaling law per family (losses of "
            f"different objectives are not comparable); {hint}"
        )
