"""The Kimi K3 decode path: decoder (catalogue ops through the kernel registry), caches,
sampling, grammar-constrained decoding, checkpoint loader and the model-level evaluation."""
from .cache import DecodeCache
from .config import PRESETS, ModelConfig, Residual, get_config
from .decoder import K3Decoder
from .weights import init_weights

__all__ = ["DecodeCache", "K3Decoder", "ModelConfig", "PRESETS", "Residual", "get_config", "init_weights"]
