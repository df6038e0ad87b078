"""φ(cue): a fixed, seeded random-feature lift of the centred cue embedding.

The cue embedding (e.g. 384-dim MiniLM) is centred by a fixed vector (the mean of a reference
corpus, stored with the learner), renormalised to unit length, then lifted to ``dim`` features:

- ``cos``: random Fourier features, ``sqrt(2/D) cos(Ωx/σ + b)``, an RBF kernel of width σ;
- ``relu``: ``σ sqrt(2/D) relu(Ωx/σ)``, the arc-cosine kernel (σ only sets the scale).

Ω and b are drawn on the CPU from ``seed``, so every device lifts a cue to the same features.
Features are float64 so the running sums built from them are exact to rounding.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch

from memstack.operators.consolidation.errors import ShapeError

FeatureKind = Literal["cos", "relu"]


@dataclass(frozen=True)
class FeatureConfig:
    """How cues are lifted; together with the centre vector it fixes φ exactly."""

    dim_in: int = 384
    dim: int = 2048
    kind: FeatureKind = "cos"
    bandwidth: float = 0.7
    seed: int = 0

    def __post_init__(self) -> None:
        if self.dim_in < 1 or self.dim < 1:
            raise ShapeError(f"dim_in={self.dim_in} and dim={self.dim} must be >= 1")
        if self.bandwidth <= 0:
            raise ShapeError(f"bandwidth={self.bandwidth} must be > 0 (try 0.5 to 1.0)")
        if self.kind not in ("cos", "relu"):
            raise ShapeError(f"kind={self.kind!r} must be 'cos' or 'relu'")


def centre_of(reference: torch.Tensor) -> torch.Tensor:
    """The centring vector: the mean of a reference corpus of cue embeddings, float64 on CPU."""
    if reference.ndim != 2 or reference.shape[0] == 0:
        raise ShapeError(f"reference must be [n >= 1, dim_in], got {tuple(reference.shape)}")
    return reference.detach().to("cpu", torch.float64).mean(dim=0)


class FeatureMap:
    """The lift φ for one config, centre and device. Immutable after construction."""

    def __init__(self, config: FeatureConfig, centre: torch.Tensor, device: str = "cpu") -> None:
        if tuple(centre.shape) != (config.dim_in,):
            raise ShapeError(f"centre must be [{config.dim_in}], got {tuple(centre.shape)}")
        self.config = config
        self.device = torch.device(device)
        generator = torch.Generator().manual_seed(config.seed)
        omega = torch.randn(config.dim_in, config.dim, generator=generator, dtype=torch.float64)
        phase = torch.rand(config.dim, generator=generator, dtype=torch.float64) * 2 * math.pi
        self.centre = centre.detach().to(self.device, torch.float64).clone()
        self._omega = (omega / config.bandwidth).to(self.device)
        self._phase = phase.to(self.device)

    def lift(self, cues: torch.Tensor) -> torch.Tensor:
        """``[B, dim_in]`` cue embeddings → ``[B, dim]`` float64 features on this device."""
        if cues.ndim != 2 or cues.shape[1] != self.config.dim_in:
            raise ShapeError(f"cues must be [B, {self.config.dim_in}], got {tuple(cues.shape)}")
        x = cues.to(self.device, torch.float64) - self.centre
        x = x / x.norm(dim=1, keepdim=True).clamp_min(1e-12)
        z = x @ self._omega
        dim = self.config.dim
        if self.config.kind == "cos":
            return torch.cos(z.add_(self._phase)).mul_(math.sqrt(2.0 / dim))
        scale = self.config.bandwidth * math.sqrt(2.0 / dim)
        return torch.relu_(z).mul_(scale)
