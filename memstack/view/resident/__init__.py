"""The resident search index (:mod:`memstack.view.resident.index`): a search's candidates,
neighbours and rows from a copy of the ``memories`` rows held in the searching process."""

from memstack.view.resident.index import ResidentIndex, Scope
from memstack.view.resident.registry import resident_of

__all__ = ["ResidentIndex", "Scope", "resident_of"]
