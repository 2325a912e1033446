"""Large metric tables kept column by column, so that memory stays bounded whatever the size of
the logs.

A per-session metric table has one row per session: 400 k+ sessions at 20 M events. As a list of
dicts each row costs 0.5 to 1.5 kB (the dict's hash table, one float object per number), 2+ GB
over the seven per-session tables. ``Rows`` keeps the same values column by column and builds a
row's dict when it is read: floats in an ``array('d')`` (8 bytes each, NaN for None), integers in
an ``array('i')`` or ``array('q')`` (4 or 8 bytes, not a 28-byte object each past 256), other
strings such as timestamps as one string with offsets (1 byte a character, not a 70-byte object
each), a NULL in those two as a flag in a ``bytearray``; repeated strings such as session ids and
hosts interned, so the tables share them (553 MB over the seven tables at 435 k sessions as lists
of objects, about 300 MB so). It is a read-only sequence of row
dicts: ``len``, indexing, slicing and iteration give what the list did, so the rules and the
report model read it unchanged; it does not support ``json.dumps`` or in-place changes (nothing
does either to a metric table: the model copies what it shows).
"""

from __future__ import annotations

import sys
from array import array
from collections.abc import Iterator, Sequence
from functools import lru_cache

NAN = float("nan")
_CHUNK = 4096  # rows built at a time when iterating


@lru_cache(maxsize=512)
def row_maker(columns: tuple[str, ...]):
    """A function of one value per column that returns the row ``{column: value, ...}``: a dict
    display compiled for these names (keys written with ``repr``; argument ``_i`` is column i), so
    ``list(map(row_maker(columns), *cols))`` builds a table's rows with no tuple per row and no
    ``dict(zip(...))`` call (~35% less CPU than ``[dict(zip(columns, row)) for row in zip(*cols)]``
    on the per-session tables). Same dicts: same keys in the same order, a repeated name keeping
    its first place and its last value, and the same size."""
    args = ", ".join(f"_{i}" for i in range(len(columns)))
    body = ", ".join(f"{name!r}: _{i}" for i, name in enumerate(columns))
    return eval(f"lambda {args}: {{{body}}}", {"__builtins__": {}})


def build_rows(columns: Sequence[str], cols: Sequence[Sequence]) -> list[dict]:
    """The row dicts of a table given column by column (all of one length)."""
    if not cols:
        return []
    return list(map(row_maker(tuple(columns)), *cols))


# array typecodes an integer column is tried in, smallest first (a value past one: the next)
_INT_CODES = ("i", "q")


class _Text:
    """A string column as one string and the end offset of each value (None: flagged in ``null``)."""

    __slots__ = ("parts", "text", "ends", "null")

    def __init__(self):
        self.parts: list[str] = []  # chunks until sealed, then one string in ``text``
        self.text = ""
        self.ends = array("q")
        self.null: bytearray | None = None

    def extend(self, col: list) -> None:
        if None in col:
            if self.null is None:
                self.null = bytearray(len(self.ends))
            self.null.extend(v is None for v in col)
            col = ["" if v is None else v for v in col]
        elif self.null is not None:
            self.null.extend(bytes(len(col)))
        end = self.ends[-1] if self.ends else 0
        for n in map(len, col):
            end += n
            self.ends.append(end)
        self.parts.append("".join(col))

    def seal(self) -> None:
        self.text = "".join(self.parts)
        self.parts = []

    def slice(self, lo: int, hi: int) -> list:
        ends = self.ends[lo:hi]
        starts = array("q", (self.ends[lo - 1] if lo else 0,))
        starts.extend(ends[:-1])
        out = list(map(self.text.__getitem__, map(slice, starts, ends)))
        if self.null is not None:
            out = [None if n else v for v, n in zip(out, self.null[lo:hi], strict=True)]
        return out


class _Ints:
    """An integer column in the smallest array that holds it (None: flagged in ``null``)."""

    __slots__ = ("data", "null")

    def __init__(self):
        self.data = array(_INT_CODES[0])
        self.null: bytearray | None = None

    def extend(self, col: list) -> None:
        if None in col:
            if self.null is None:
                self.null = bytearray(len(self.data))
            self.null.extend(v is None for v in col)
            col = [0 if v is None else v for v in col]
        elif self.null is not None:
            self.null.extend(bytes(len(col)))
        n = len(self.data)
        try:
            self.data.extend(col)
        except OverflowError:
            # a value past this typecode: the next one (extend may have appended part of col)
            code = _INT_CODES[_INT_CODES.index(self.data.typecode) + 1]
            self.data = array(code, self.data[:n])
            self.data.extend(col)

    def slice(self, lo: int, hi: int) -> list:
        part = self.data[lo:hi].tolist()
        if self.null is not None:
            part = [None if n else v for v, n in zip(part, self.null[lo:hi], strict=True)]
        return part


class Rows(Sequence):
    """A metric table as columns; see the module doc."""

    # _interned: which columns to intern, needed only while filling (``seal`` drops it)
    __slots__ = ("columns", "_floats", "_nan", "_data", "_n", "_interned")

    def __init__(
        self,
        columns: list[str],
        floats: list[bool],
        interned: list[bool] | None = None,
        ints: list[bool] | None = None,
        texts: list[bool] | None = None,
    ):
        """``floats``: DOUBLE columns; ``interned``: strings shared across tables (ids, hosts);
        ``ints``: integer columns that fit 64 bits; ``texts``: other strings (timestamps)."""
        self.columns = list(columns)
        self._floats = list(floats)
        self._nan = [False] * len(floats)  # a float column holding a None (stored as NaN)
        ints = ints or [False] * len(floats)
        texts = texts or [False] * len(floats)
        interned = interned or [False] * len(floats)
        self._data: list = [
            array("d") if f else _Ints() if i else _Text() if t and not s else []
            for f, i, t, s in zip(floats, ints, texts, interned, strict=True)
        ]
        self._n = 0
        self._interned = interned

    def extend(self, values: list[list]) -> None:
        """Append rows given column by column (JSON values: None for NULL, NaN or inf)."""
        for i, col in enumerate(values):
            data = self._data[i]
            if self._floats[i]:
                if None in col:
                    self._nan[i] = True
                    col = [NAN if v is None else v for v in col]
                data.extend(col)
            elif self._interned and self._interned[i]:
                intern = sys.intern
                data.extend(v if v is None else intern(v) for v in col)
            else:
                data.extend(col)
        if values:
            self._n += len(values[0])

    def seal(self) -> Rows:
        self._interned = None
        for data in self._data:
            if isinstance(data, _Text):
                data.seal()
        return self

    def _columns(self, lo: int, hi: int) -> list[list]:
        out = []
        for f, nan, data in zip(self._floats, self._nan, self._data, strict=True):
            if f:
                part = data[lo:hi]
                # NaN stands for None in a float column (the metric values are finite or None)
                part = [None if v != v else v for v in part] if nan else part.tolist()
            elif isinstance(data, _Ints | _Text):
                part = data.slice(lo, hi)
            else:
                part = data[lo:hi]
            out.append(part)
        return out

    def __len__(self) -> int:
        return self._n

    def nbytes(self) -> int:
        """Bytes the columns hold (not the interned strings: the tables share them)."""
        total = 0
        for data in self._data:
            if isinstance(data, array):
                total += data.itemsize * len(data)
            elif isinstance(data, _Ints):
                total += data.data.itemsize * len(data.data) + len(data.null or b"")
            elif isinstance(data, _Text):
                total += sys.getsizeof(data.text) + 8 * len(data.ends) + len(data.null or b"")
            else:
                total += 8 * len(data)  # a list: one pointer a row
        return total

    def __iter__(self) -> Iterator[dict]:
        if not self.columns:
            return
        make = row_maker(tuple(self.columns))
        for lo in range(0, self._n, _CHUNK):
            yield from map(make, *self._columns(lo, min(lo + _CHUNK, self._n)))

    def __getitem__(self, index):
        if isinstance(index, slice):
            lo, hi, step = index.indices(self._n)
            if step != 1:
                return [self[i] for i in range(lo, hi, step)]
            return build_rows(self.columns, self._columns(lo, hi))
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


class LazyRows(Sequence):
    """A metric table kept outside Python (a DuckDB table, metrics.DuckDBSource) and read a chunk
    at a time: ``chunks()`` yields lists of row dicts, in the table's order, each time the table
    is iterated. Python holds one chunk per iteration in progress, never the table (a ``Rows``
    grows with the sessions). Like ``Rows`` a
    read-only sequence of row dicts (``len``, iteration, indexing, ``==``), so the rules and the
    report model read it unchanged; iterating it twice reads the table twice (a rule reads a
    table as a stream, keeping only its hits)."""

    __slots__ = ("columns", "_n", "_chunks", "_close")

    def __init__(self, columns: list[str], n: int, chunks, close=None):
        """``n``: rows; ``chunks()``: a new iterator over lists of row dicts; ``close()``: frees
        the table (``release``)."""
        self.columns = list(columns)
        self._n = n
        self._chunks = chunks
        self._close = close

    def __len__(self) -> int:
        return self._n

    def nbytes(self) -> int:
        """Bytes Python holds for the table between reads: none (a read holds one chunk)."""
        return 0

    def __iter__(self) -> Iterator[dict]:
        for chunk in self._chunks():
            yield from chunk

    def __getitem__(self, index):
        # by position in a pass (nothing reads a per-session table by index on the hot path)
        if isinstance(index, slice):
            lo, hi, step = index.indices(self._n)
            wanted = range(lo, hi, step)
            if step < 0:
                return [self[i] for i in wanted]
            out = []
            for i, row in enumerate(self):
                if i >= hi:
                    break
                if i in wanted:
                    out.append(row)
            return out
        if index < 0:
            index += self._n
        if not 0 <= index < self._n:
            raise IndexError("LazyRows index out of range")
        for i, row in enumerate(self):
            if i == index:
                return row
        raise IndexError("LazyRows index out of range")

    def release(self) -> None:
        """Free the table where it is kept (later reads are an error there)."""
        if self._close is not None:
            self._close()
            self._close = None

    def __eq__(self, other) -> bool:
        if isinstance(other, Rows | LazyRows | list | tuple):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    __hash__ = None

    def __repr__(self) -> str:
        return f"LazyRows({self._n} rows, columns {self.columns})"
