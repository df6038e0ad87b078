"""The consolidation learner: an analytic ridge readout kept as running sums, no backprop.

Writing an item (cue x, target y, weight w, log time t) adds ``w φ(x)φ(x)ᵀ`` to A and
``w φ(x)yᵀ`` to C; the weights are ``W = (A + λI)⁻¹ C``, a float64 Cholesky solve done lazily on
read (or eagerly every ``refresh_every`` writes). Recursive updates of the sums equal joint
training on every surviving item (analytic continual learning), so removing an item, by
subtracting its terms, is exact: the result equals never having written it.

Forgetting over time: with a half-life h, an item written at t counts ``w·2^(-(now - t)/h)``.
The sums are kept referenced to a time t0 (``S = Σ w e^{γ(t - t0)} ...``), so the decay is one
scalar applied on read, ``A(now) = e^{-γ(now - t0)} S``, never an O(D²) pass per write;
t0 moves forward (one rescale) only when the exponent grows large.

State is ``M = [S_A | S_C]`` (one ``[D, D + dim_out]`` float64 tensor, so a batch update is a
single GEMM ``M += Φᵀ [wΦ | wY]``), t0, now, and counters. The same code runs on CPU or CUDA.
Applied-offset bookkeeping belongs to the caller (an actor): ``advance``, ``version``,
``digest`` and the checkpoint's ``meta`` are its hooks.
"""

from __future__ import annotations

import hashlib
import logging
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from memstack.operators.consolidation.errors import ShapeError, SolveError
from memstack.operators.consolidation.features import FeatureConfig, FeatureMap
from memstack.operators.consolidation.writelog import WriteBatch, WriteLog

logger = logging.getLogger(__name__)

_RESCALE_EXPONENT = 30.0
"""Move t0 forward once the stored sums carry a factor above e^30 (far from float64 limits)."""

_CANCELLATION_LIMIT = 1e-6
"""Recompute the sums from the log when the live mass falls below this share of the mass ever
added since the last recompute: subtracting big terms from small survivors would otherwise lose
digits (rounding error grows as total / live)."""


@dataclass(frozen=True)
class LearnerConfig:
    """Everything that fixes the learner's function, besides the centre vector."""

    features: FeatureConfig = field(default_factory=FeatureConfig)
    dim_out: int = 384
    ridge: float = 0.1
    half_life_s: float | None = None
    refresh_every: int = 0
    temperature: float = 0.05

    def __post_init__(self) -> None:
        if self.ridge <= 0:
            raise SolveError(f"ridge={self.ridge} must be > 0 (try 1e-2)")
        if self.half_life_s is not None and self.half_life_s <= 0:
            raise ShapeError(f"half_life_s={self.half_life_s} must be > 0, or None for no decay")

    @property
    def decay_rate(self) -> float:
        """γ in ``e^{-γ Δt}``: ln 2 / half-life, 0 without decay."""
        return 0.0 if self.half_life_s is None else math.log(2.0) / self.half_life_s

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LearnerConfig:
        body = dict(data)
        body["features"] = FeatureConfig(**body["features"])
        return cls(**body)


@dataclass(frozen=True)
class Applied:
    """What one mutation did: the learner's version after it, counts, ids that were not live."""

    version: int
    written: int = 0
    removed: int = 0
    missing: tuple[str, ...] = ()


@dataclass(frozen=True)
class Recall:
    """A closed-book answer: the nearest known value to ``W φ(cue)``."""

    value_id: str
    confidence: float
    cosine: float
    margin: float


class RidgeLearner:
    """Running sums (A, C) over live items, with exact removal and lazy exact decay."""

    def __init__(self, config: LearnerConfig, centre: torch.Tensor, device: str = "cpu") -> None:
        self.config = config
        self.features = FeatureMap(config.features, centre, device)
        self.device = self.features.device
        dim = config.features.dim
        self._m = torch.zeros(dim, dim + config.dim_out, dtype=torch.float64, device=self.device)
        self.log = WriteLog(config.features.dim_in, config.dim_out, self.device)
        self.t0: float | None = None
        self.now = -math.inf
        self.version = 0
        self.writes = 0
        self.removals = 0
        self._pending = 0
        self._w: torch.Tensor | None = None
        self._w_version = -1
        self._live_mass = torch.zeros((), dtype=torch.float64, device=self.device)
        self._total_mass = torch.zeros((), dtype=torch.float64, device=self.device)

    # -- mutations -------------------------------------------------------------------------

    def write(
        self, item_id: str, cue: torch.Tensor, target: torch.Tensor, *, log_time: float,
        weight: float = 1.0,
    ) -> Applied:
        """Write one item (see ``write_batch``)."""
        cues, targets = cue.reshape(1, -1), target.reshape(1, -1)
        batch = WriteBatch.of([item_id], cues, targets, log_time, weight)
        return self.write_batch(batch)

    def write_batch(self, batch: WriteBatch) -> Applied:
        """Add every item of the batch to the sums and the write log (ids must not be live)."""
        self._check(batch)
        if len(batch) == 0:
            return Applied(self.version)
        self.log.check_new(batch.item_ids)  # refuse live ids before the sums change
        self._reference_to(float(batch.log_times.max()))
        self._accumulate(batch, sign=1.0)  # queued on the device; the log copy overlaps it
        self.log.append(batch, checked=True)
        self.writes += len(batch)
        return self._mutated(len(batch), written=len(batch))

    def remove(self, item_ids: Sequence[str]) -> Applied:
        """Subtract these items' terms exactly and erase them from the log; unknown ids are
        reported in ``missing`` (removing twice is harmless, so replays are idempotent)."""
        taken, missing = self.log.take(item_ids)
        if len(taken):
            self._accumulate(taken, sign=-1.0)
            self.removals += len(taken)
            live_mass, total_mass = self.masses
            if live_mass <= _CANCELLATION_LIMIT * total_mass:
                self._recompute()
        if missing:
            logger.debug("remove: %d id(s) were not live", len(missing))
        return self._mutated(len(taken), removed=len(taken), missing=missing)

    def supersede(self, old_ids: Sequence[str], batch: WriteBatch) -> Applied:
        """Replace facts: remove the old items, then write their successors."""
        removed = self.remove(old_ids)
        written = self.write_batch(batch)
        return Applied(written.version, written.written, removed.removed, removed.missing)

    def advance(self, log_time: float) -> None:
        """Move 'now' forward to a log time the caller has applied (decay is relative to now)."""
        self._reference_to(log_time)
        self.version += 1

    # -- reads -------------------------------------------------------------------------------

    @property
    def n_items(self) -> int:
        return len(self.log)

    def sums(self, at: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """The decayed sums ``(A, C)`` as of log time ``at`` (default: now), as new tensors."""
        dim = self.config.features.dim
        scale = self._decay_to(self.now if at is None else at)
        return self._m[:, :dim] * scale, self._m[:, dim:] * scale

    def weights(self) -> torch.Tensor:
        """``W = (A + λI)⁻¹ C`` as of now, ``[D, dim_out]`` float64; solved if stale."""
        if self._w is None or self._w_version != self.version:
            self.refresh()
        assert self._w is not None
        return self._w

    def refresh(self) -> None:
        """Solve for W now (Cholesky in float64)."""
        dim = self.config.features.dim
        scale = self._decay_to(self.now) if self.t0 is not None else 1.0
        mat = self._m[:, :dim].clone()
        mat.diagonal().add_(self.config.ridge / scale)
        chol, info = torch.linalg.cholesky_ex(mat)
        if int(info) != 0:
            raise SolveError(
                f"A + λI is not positive definite (minor {int(info)}); raise ridge above "
                f"{self.config.ridge} or rebuild() the learner from its write log"
            )
        self._w = torch.cholesky_solve(self._m[:, dim:], chol)
        self._w_version = self.version
        self._pending = 0

    def predict(self, cues: torch.Tensor) -> torch.Tensor:
        """``[B, dim_in]`` cues → ``[B, dim_out]`` predicted values (float64)."""
        return self.features.lift(cues) @ self.weights()

    def decode(
        self, cues: torch.Tensor, candidates: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Nearest candidate (cosine) per cue: ``(index, confidence, cosine, margin)``.

        Confidence is the softmax probability (temperature ``config.temperature``) of the
        best candidate; margin is its lead over the runner-up.
        """
        pred = torch.nn.functional.normalize(self.predict(cues), dim=1)
        cands = torch.nn.functional.normalize(candidates.to(self.device, torch.float64), dim=1)
        cos = pred @ cands.T
        prob = torch.softmax(cos / self.config.temperature, dim=1)
        top = prob.topk(min(2, prob.shape[1]), dim=1)
        best = top.indices[:, 0]
        second = top.values[:, 1] if prob.shape[1] > 1 else torch.zeros_like(top.values[:, 0])
        cosine = cos.gather(1, best[:, None])[:, 0]
        return best, top.values[:, 0], cosine, top.values[:, 0] - second

    def recall(
        self, cues: torch.Tensor, candidates: torch.Tensor, candidate_ids: Sequence[str]
    ) -> list[Recall]:
        """Closed-book answers for ``[B, dim_in]`` cues among known values ``[K, dim_out]``."""
        if len(candidate_ids) != candidates.shape[0]:
            raise ShapeError(f"{len(candidate_ids)} ids for {candidates.shape[0]} candidates")
        decoded = self.decode(cues.reshape(-1, cues.shape[-1]), candidates)
        best, conf, cos, margin = (t.cpu() for t in decoded)
        return [
            Recall(candidate_ids[int(i)], float(p), float(c), float(m))
            for i, p, c, m in zip(best, conf, cos, margin, strict=True)
        ]

    def digest(self) -> str:
        """SHA-256 of the state (sums, t0, now): equal digests mean identical weights."""
        h = hashlib.sha256(self._m.detach().cpu().numpy().tobytes())
        h.update(repr((self.t0, self.now)).encode())
        return h.hexdigest()

    # -- rebuild and internals -----------------------------------------------------------

    @classmethod
    def rebuild(
        cls, config: LearnerConfig, centre: torch.Tensor, live: WriteBatch, *,
        now: float | None = None, device: str = "cpu", chunk: int = 4096,
    ) -> RidgeLearner:
        """A learner built from scratch from surviving write records (e.g. ``log.live()``)."""
        learner = cls(config, centre, device)
        for start in range(0, len(live), chunk):
            end = min(start + chunk, len(live))
            part = WriteBatch(
                live.item_ids[start:end], live.cues[start:end], live.targets[start:end],
                live.weights[start:end], live.log_times[start:end],
            )
            learner.write_batch(part)
        if now is not None:
            learner.advance(now)
        return learner

    def _check(self, batch: WriteBatch) -> None:
        want = (self.config.features.dim_in, self.config.dim_out)
        if (batch.cues.shape[1], batch.targets.shape[1]) != want:
            raise ShapeError(
                f"cues/targets must be [B, {want[0]}]/[B, {want[1]}], got "
                f"{tuple(batch.cues.shape)}/{tuple(batch.targets.shape)}"
            )

    def _accumulate(self, batch: WriteBatch, *, sign: float) -> None:
        assert self.t0 is not None
        phi = self.features.lift(batch.cues)
        times = batch.log_times.to(self.device)
        coef = batch.weights.to(self.device) * torch.exp(self.config.decay_rate * (times - self.t0))
        rhs = torch.cat([phi, batch.targets.to(self.device, torch.float64)], dim=1)
        rhs.mul_((sign * coef)[:, None])
        self._m.addmm_(phi.T, rhs)
        mass = (coef * (phi * phi).sum(dim=1)).sum()  # stays on the device: no sync here
        self._live_mass = (self._live_mass + sign * mass).clamp_min(0.0)
        self._total_mass = self._total_mass + mass

    def _recompute(self) -> None:
        """Rebuild the sums from the surviving log records (exact, no cancellation)."""
        live = self.log.live()
        logger.info("recomputing sums from %d live item(s) to avoid cancellation", len(live))
        self._m.zero_()
        self._live_mass = torch.zeros_like(self._live_mass)
        self._total_mass = torch.zeros_like(self._total_mass)
        if len(live) == 0:
            return
        self.t0 = max(float(live.log_times.max()), self.t0 or -math.inf)
        self._accumulate(live, sign=1.0)

    def _reference_to(self, log_time: float) -> None:
        """Advance now; move t0 (rescaling the sums once) when the exponent grows large."""
        self.now = max(self.now, log_time)
        if self.t0 is None:
            self.t0 = self.now
            return
        exponent = self.config.decay_rate * (self.now - self.t0)
        if exponent > _RESCALE_EXPONENT:
            factor = math.exp(-exponent)
            self._m.mul_(factor)
            self._live_mass = self._live_mass * factor
            self._total_mass = self._total_mass * factor
            self.t0 = self.now

    def _decay_to(self, at: float) -> float:
        return 1.0 if self.t0 is None else math.exp(-self.config.decay_rate * (at - self.t0))

    def _mutated(self, n: int, **counts: Any) -> Applied:
        self.version += 1
        self._pending += n
        every = self.config.refresh_every
        if every and self._pending >= every:
            self.refresh()
        return Applied(self.version, **counts)

    def load_state(self, m: torch.Tensor, t0: float | None, now: float,
                   counters: dict[str, int], live: WriteBatch, masses: tuple[float, float]) -> None:
        """Install a checkpointed state (used by ``checkpoint.restore``)."""
        self._m = m.to(self.device, torch.float64).clone()
        self.t0, self.now = t0, now
        self._live_mass, self._total_mass = (
            torch.tensor(m, dtype=torch.float64, device=self.device) for m in masses
        )
        self.version, self.writes = counters["version"], counters["writes"]
        self.removals = counters["removals"]
        self.log = WriteLog(self.config.features.dim_in, self.config.dim_out, self.device)
        if len(live):
            self.log.append(live)
        self._w, self._w_version, self._pending = None, -1, 0

    @property
    def masses(self) -> tuple[float, float]:
        """(live, total) mass referenced to t0: the cancellation guard's bookkeeping."""
        return float(self._live_mass), float(self._total_mass)

    def state_tensors(self) -> dict[str, torch.Tensor]:
        """The sums and the centre, on the CPU (used by ``checkpoint.snapshot``)."""
        return {"m": self._m.detach().cpu(), "centre": self.features.centre.detach().cpu()}
