"""A muP training run end to end: it records its parametrization and base width in MLflow, and
an SP run's params are the ones of before muP."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TINY = [
    "model.d_model=32",
    "model.n_layers=1",
    "model.n_heads=4",
    "model.n_kv_heads=null",
    "train.seq_len=32",
    "train.batch_tokens=256",
    "train.tokens=2048",  # 8 steps
    "train.warmup=2",
    "train.progress=none",
    "data.eval_tokens=256",
    "data.tokenizer=byte",
    "data.source=text",
]


@pytest.fixture
def lab(tmp_path) -> list[str]:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for i, name in enumerate(("argparse.py", "textwrap.py", "shlex.py", "fractions.py")):
        text = (Path(os.__file__).parent / name).read_text(encoding="utf-8")
        (corpus / f"doc{i}.txt").write_text(text, encoding="utf-8")
    return [
        f"tracking.uri=sqlite:///{tmp_path / 'mlruns.db'}",
        f"paths.runs_dir={tmp_path / 'runs'}",
        f"paths.cache_dir={tmp_path / 'cache'}",
        f"data.path={corpus}",
        *TINY,
    ]


def run(overrides: list[str]):
    import torch
    from hydra import compose, initialize_config_dir
    from mlflow import MlflowClient

    from training.train import train

    torch.set_num_threads(1)
    with initialize_config_dir(str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=overrides)
    result = train(cfg)
    assert result.status == "FINISHED", result.failure_reason
    uri = next(o.split("=", 1)[1] for o in overrides if o.startswith("tracking.uri="))
    return result, MlflowClient(uri).get_run(result.run_id).data.params


def test_mup_run_records_base_width_and_sp_run_does_not(lab):
    mup, mup_params = run([*lab, "model.parametrization=mup", "model.mup_base_width=16"])
    assert mup_params["model.parametrization"] == "mup"
    assert mup_params["model.mup_base_width"] == "16"
    sp, sp_params = run(lab)
    assert not {"model.parametrization", "model.mup_base_width"} & set(sp_params)
    assert sp.run_key != mup.run_key
    assert mup_params["n_params"] == sp_params["n_params"]  # same shape, same counts
    assert mup_params["flops_exact"] == sp_params["flops_exact"]
    assert mup.final_val_loss != sp.final_val_loss  # a different model trained
