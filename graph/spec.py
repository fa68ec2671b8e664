"""The architecture of a transformer, as numbers: what every builder and importer produces."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

__all__ = ["Activation", "ModelSpec"]


class Activation(StrEnum):
    GELU = "gelu"
    SWIGLU = "swiglu"
    RELU = "relu"
    RELU2 = "relu2"

    @property
    def is_gated(self) -> bool:
        return self is Activation.SWIGLU


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelSpec:
    """A decoder-only transformer. ``head_dim`` defaults to hidden // heads."""

    name: str
    num_layers: int
    hidden: int
    ffn_hidden: int
    num_heads: int
    num_kv_heads: int
    vocab: int
    head_dim: int = 0
    activation: Activation = Activation.SWIGLU
    tied_embeddings: bool = False
    norm: str = "rmsnorm"
    dropout: bool = False  # hidden/attention dropout in training (GPT-3 era); masks are stored

    def __post_init__(self) -> None:
        if self.head_dim == 0:
            object.__setattr__(self, "head_dim", self.hidden // self.num_heads)
        check_model(self)

    @property
    def q_dim(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.num_kv_heads * self.head_dim


def check_model(spec: ModelSpec) -> None:
    """Structural rules of a transformer; ValueError names the field."""
    for field in ("num_layers", "hidden", "ffn_hidden", "num_heads", "num_kv_heads", "vocab"):
        value = getattr(spec, field)
        if value < 1:
            raise ValueError(f"model.{field}={value} must be a positive integer")
    if spec.num_heads % spec.num_kv_heads:
        raise ValueError(
            f"model.kv_heads={spec.num_kv_heads} must divide model.heads={spec.num_heads} "
            "(grouped-query attention shares each K/V head among heads/kv_heads query heads)"
        )
    if spec.head_dim < 1:
        raise ValueError(
            f"model.head_dim={spec.head_dim} must be positive (hidden={spec.hidden}, "
            f"heads={spec.num_heads}); give model.head_dim explicitly"
        )
