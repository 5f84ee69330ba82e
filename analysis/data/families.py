"""Model families in the analysis: losses of different objectives are not comparable.

A decoder's next-token loss, an encoder's masked-LM loss (on 15% of its tokens) and an
encoder-decoder's span-corruption loss measure different things, so one scaling law over runs
of several families (or a comparison of their losses) means nothing. Each run's family is read
from its `arch` tag: non-decoder families lead with theirs (`models.ModelConfig.arch`,
`encoder-post-layernorm-...`); a decoder's arch names no family. A run trained with another
objective than its family's own (`objective.name`: an encoder-decoder on paired data,
`seq2seq_pairs`, instead of span corruption) is its own group, `encoder_decoder/seq2seq_pairs`.
Fit one law per family with `--group family`.
"""

from __future__ import annotations

import pandas as pd

from analysis.data.load import InputError

FAMILIES = ("decoder", "encoder_decoder", "encoder")


# the objective each family trains with unless its run says otherwise (`objective.name`, a
# run param of the non-decoder families); another objective is another loss, so another group
DEFAULT_OBJECTIVE = {"decoder": None, "encoder": "mlm", "encoder_decoder": "span_corruption"}
OBJECTIVE_COLUMN = "objective.name"


def family_of(arch: str, objective: object = None) -> str:
    """The family an arch signature names (``decoder`` when it names none), with the objective
    appended where it is not the family's own: ``encoder_decoder/seq2seq_pairs``."""
    head = str(arch).split("-", 1)[0]
    family = head if head in FAMILIES else "decoder"
    if isinstance(objective, str) and objective and objective != DEFAULT_OBJECTIVE[family]:
        return f"{family}/{objective}"
    return family


def with_family(runs: pd.DataFrame) -> pd.DataFrame:
    """`runs` with a `family` column (from `arch` and `objective.name`; every run a decoder
    where there is no arch)."""
    if "family" in runs.columns:
        return runs
    if "arch" not in runs.columns:
        return runs.assign(family="decoder")
    objectives = runs[OBJECTIVE_COLUMN] if OBJECTIVE_COLUMN in runs.columns else [None] * len(runs)
    families = [family_of(a, o) for a, o in zip(runs["arch"], objectives)]
    return runs.assign(family=pd.Series(families, index=runs.index, dtype=object))


def ordered(families) -> list[str]:
    """Family labels in FAMILIES order, each family's other objectives after it."""
    rank = {f: i for i, f in enumerate(FAMILIES)}
    return sorted(set(map(str, families)), key=lambda f: (rank[f.split("/", 1)[0]], f))


def check_one_family(runs: pd.DataFrame, what: str, hint: str) -> None:
    """InputError (one line) when `runs` mixes families: their losses are not comparable."""
    families = sorted(with_family(runs)["family"].astype(str).unique())
    if len(families) > 1:
        raise InputError(
            f"{what} holds model families {families}: one scaling law per family (losses of "
            f"different objectives are not comparable); {hint}"
        )
