"""Consolidation: fold facts into weights in closed form (ridge running sums), no backprop.

``RidgeLearner`` keeps ``A = Σ w φφᵀ`` and ``C = Σ w φyᵀ`` over live items, solves
``W = (A + λI)⁻¹ C`` in float64, removes items exactly, decays over log time lazily, and
checkpoints atomically (``checkpoint``). Targets come from a ``Teacher`` (distillation).
Pure torch: no Ray, Kafka or store imports here; the actors wrap it.
"""

from memstack.operators.consolidation.errors import (
    CheckpointError,
    ConsolidationError,
    DuplicateItemError,
    ShapeError,
    SolveError,
)
from memstack.operators.consolidation.features import FeatureConfig, FeatureMap, centre_of
from memstack.operators.consolidation.learner import Applied, LearnerConfig, Recall, RidgeLearner
from memstack.operators.consolidation.teacher import (
    DictTeacher,
    EmbeddingTeacher,
    FactCue,
    Teacher,
    UnknownCueError,
    softmax_mix,
)
from memstack.operators.consolidation.writelog import WriteBatch, WriteLog

__all__ = [
    "Applied",
    "CheckpointError",
    "ConsolidationError",
    "DictTeacher",
    "DuplicateItemError",
    "EmbeddingTeacher",
    "FactCue",
    "FeatureConfig",
    "FeatureMap",
    "LearnerConfig",
    "Recall",
    "RidgeLearner",
    "ShapeError",
    "SolveError",
    "Teacher",
    "UnknownCueError",
    "WriteBatch",
    "WriteLog",
    "centre_of",
    "softmax_mix",
]
