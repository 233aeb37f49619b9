"""Many rows of one table in few statements: the writer's tick rows (daemon.store.tick_rows)
and the minute rollups (daemon.store.maintenance)."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from itertools import chain

# Rows a wide statement binds at once (x 11 columns at most, the gpu_samples': under SQLite's oldest limit of
# 999 parameters). 64: at 256 processes 16 rows a statement cost 25 % more, 128 no less.
WIDE_ROWS = 64


class WideInsert:
    """One table's rows inserted many to a statement: `executemany` binds and steps
    the statement once per row, and that round trip was ~40 % of the insert at 256 processes
    (a tick's process rows 0.67-0.85 ms through executemany, 0.46 ms 64 to a statement).
    Rows that do not fill a wide statement go 8 to a statement, the last few one by one, so
    three statements are ever prepared (SQLite's statement cache keeps them)."""

    def __init__(self, head: str, columns: int) -> None:
        one = "(" + ",".join("?" * columns) + ")"
        self.statements = [(rows, f"{head} VALUES {','.join([one] * rows)}")
                           for rows in (WIDE_ROWS, 8)]
        self.one_row = f"{head} VALUES {one}"

    def run(self, conn: sqlite3.Connection, rows: Sequence[Sequence[object]]) -> None:
        """Insert `rows` (tuples of the statement's columns, in order) on `conn`."""
        start, total = 0, len(rows)
        for size, statement in self.statements:
            while total - start >= size:
                conn.execute(statement, tuple(chain.from_iterable(rows[start:start + size])))
                start += size
        if start < total:
            conn.executemany(self.one_row, rows[start:])
