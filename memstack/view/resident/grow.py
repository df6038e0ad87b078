"""Arrays that grow by appends at amortised O(1), as numpy views of their filled prefix."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt


class Grow:
    """A 1-d (``width=0``) or 2-d array grown by appending rows; :meth:`view` is the filled
    prefix (a view: appends that fit the capacity do not move it, a reallocation leaves a
    view taken before it valid and unchanged)."""

    def __init__(self, dtype: npt.DTypeLike, width: int = 0, capacity: int = 64) -> None:
        shape = (capacity,) if width == 0 else (capacity, width)
        self._data: npt.NDArray[Any] = np.empty(shape, dtype=dtype)
        self.n = 0

    def append(self, values: npt.ArrayLike) -> None:
        values = np.asarray(values, dtype=self._data.dtype)
        if values.ndim == self._data.ndim - 1:
            values = values[None]
        need = self.n + len(values)
        if need > len(self._data):
            grown = np.empty((max(need, 2 * len(self._data)), *self._data.shape[1:]),
                             dtype=self._data.dtype)
            grown[: self.n] = self._data[: self.n]
            self._data = grown
        self._data[self.n:need] = values
        self.n = need

    def view(self) -> npt.NDArray[Any]:
        return self._data[: self.n]

    def __setitem__(self, index: Any, value: Any) -> None:
        self._data[: self.n][index] = value

    def __len__(self) -> int:
        return self.n
