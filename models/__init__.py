"""scaling-lab model factory: ``from models import ModelConfig, build_model, count_params,
flops_per_token``. Pure PyTorch: no devices, precision, logging or distribution in here."""

from models.accounting import FlopCount, ParamCount, count_params, flops_per_token
from models.attention import KVCache
from models.config import ModelConfig
from models.lm import TransformerLM, build_model

__all__ = [
    "FlopCount",
    "KVCache",
    "ModelConfig",
    "ParamCount",
    "TransformerLM",
    "build_model",
    "count_params",
    "flops_per_token",
]
