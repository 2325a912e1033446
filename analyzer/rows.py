"""Large metric tables kept column by column (issue 16 item 4: memory bounded whatever the size of
the logs).

A per-session metric table has one row per session: 400 k+ sessions at 20 M events. As a list of
dicts each row costs 0.5 to 1.5 kB (the dict's hash table, one float object per number), 2+ GB
over the seven per-session tables. ``Rows`` keeps the same values column by column (numbers in a
``array('d')``, 8 bytes each; repeated strings such as session ids and hosts interned, so the
tables share them) and builds a row's dict when it is read. It is a read-only sequence of row
dicts: ``len``, indexing, slicing and iteration give what the list did, so the rules and the
report model read it unchanged; it does not support ``json.dumps`` or in-place changes (nothing
does either to a metric table: the model copies what it shows).
"""

from __future__ import annotations

import sys
from array import array
from collections.abc import Iterator, Sequence
from functools import partial

NAN = float("nan")
_CHUNK = 4096  # rows built at a time when iterating


class Rows(Sequence):
    """A metric table as columns; see the module doc."""

    # _interned: which columns to intern, needed only while filling (``seal`` drops it)
    __slots__ = ("columns", "_floats", "_nan", "_data", "_n", "_interned")

    def __init__(self, columns: list[str], floats: list[bool], interned: list[bool] | None = None):
        self.columns = list(columns)
        self._floats = list(floats)
        self._nan = [False] * len(floats)  # a float column holding a None (stored as NaN)
        self._data: list = [array("d") if f else [] for f in floats]
        self._n = 0
        self._interned = interned

    def extend(self, values: list[list]) -> None:
        """Append rows given column by column (JSON values: None for NULL, NaN or inf)."""
        for i, col in enumerate(values):
            if self._floats[i]:
                if None in col:
                    self._nan[i] = True
                    col = [NAN if v is None else v for v in col]
                self._data[i].extend(col)
            elif self._interned and self._interned[i]:
                intern = sys.intern
                self._data[i].extend(v if v is None else intern(v) for v in col)
            else:
                self._data[i].extend(col)
        if values:
            self._n += len(values[0])

    def seal(self) -> Rows:
        self._interned = None
        return self

    def _columns(self, lo: int, hi: int) -> list[list]:
        out = []
        for f, nan, data in zip(self._floats, self._nan, self._data, strict=True):
            part = data[lo:hi]
            if f:
                # NaN stands for None in a float column (the metric values are finite or None)
                part = [None if v != v else v for v in part] if nan else part.tolist()
            out.append(part)
        return out

    def __len__(self) -> int:
        return self._n

    def __iter__(self) -> Iterator[dict]:
        build = partial(zip, self.columns)  # dict(zip(columns, row)) per row, without a Python loop
        for lo in range(0, self._n, _CHUNK):
            yield from map(
                dict, map(build, zip(*self._columns(lo, min(lo + _CHUNK, self._n)), strict=True))
            )

    def __getitem__(self, index):
        if isinstance(index, slice):
            lo, hi, step = index.indices(self._n)
            if step != 1:
                return [self[i] for i in range(lo, hi, step)]
            return [
                dict(zip(self.columns, row, strict=True))
                for row in zip(*self._columns(lo, hi), strict=True)
            ]
        if index < 0:
            index += self._n
        if not 0 <= index < self._n:
            raise IndexError("Rows index out of range")
        return dict(
            zip(self.columns, (col[0] for col in self._columns(index, index + 1)), strict=True)
        )

    def __eq__(self, other) -> bool:
        if isinstance(other, Rows | list | tuple):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    __hash__ = None  # mutable-looking sequence compared by value, like list

    def __repr__(self) -> str:
        return f"Rows({self._n} rows, columns {self.columns})"
