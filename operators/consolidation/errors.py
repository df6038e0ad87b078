"""Errors of the consolidation learner; each says what to do next."""

from __future__ import annotations

from memstack.foundation.errors import MemstackError


class ConsolidationError(MemstackError):
    """Root of the consolidation learner's errors."""


class DuplicateItemError(ConsolidationError):
    """An item id was written while a live item already has it.

    Use ``supersede(old_id, ...)`` to replace a fact, or ``remove([id])`` first.
    """


class ShapeError(ConsolidationError):
    """A cue, target or weight has the wrong shape for this learner's config."""


class SolveError(ConsolidationError):
    """``A + λI`` is not positive definite: raise ``ridge`` in the LearnerConfig (e.g. 1e-3)."""


class CheckpointError(ConsolidationError):
    """A checkpoint cannot be read: it is truncated, from another format version, or not ours.

    Restore from an older checkpoint, or rebuild the learner from its write log.
    """


class ConsolidationJobError(ConsolidationError):
    """The consolidation job lost an actor more often than it may restart one; the message
    says what to run once the cluster is healthy (the checkpoints are kept)."""
