"""scaling-lab model factory: ``from models import ModelConfig, build_model, count_params,
flops_per_token`` (and ``export_hf`` to write a Hugging Face model directory). Pure PyTorch: no
devices, precision, logging or distribution in here."""

import warnings

from models.accounting import (
    FlopCount,
    ParamCount,
    count_params,
    flops_per_sequence,
    flops_per_token,
)
from models.attention import KVCache
from models.config import ModelConfig
from models.export_hf import ExportError, export_hf
from models.lm import TransformerLM, build_model
from models.mlm import MaskedLM
from models.seq2seq import EncoderDecoderLM

__all__ = [
    "EncoderDecoderLM",
    "ExportError",
    "FlopCount",
    "KVCache",
    "MaskedLM",
    "ModelConfig",
    "ParamCount",
    "TransformerLM",
    "build_model",
    "count_params",
    "export_hf",
    "flops_per_sequence",
    "flops_per_token",
]

# `models.export_hf` is both this function and the CLI module (`python -m models.export_hf`);
# runpy warns that the module was imported by this package before running it: harmless here.
warnings.filterwarnings(
    "ignore", message="'models.export_hf' found in sys.modules", category=RuntimeWarning
)
