"""The database a benchmark writes to: a temporary embedded cluster that is destroyed
afterwards, or STACKBENCH_DATABASE_URL, whose rows the benchmark deletes again."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


class BenchDB:
    def __init__(self, eng, temporary: bool) -> None:
        self.eng = eng
        self.temporary = temporary
        self.run_ids: list[int] = []

    @property
    def where(self) -> str:
        return "temporary embedded cluster" if self.temporary else "STACKBENCH_DATABASE_URL"


@contextmanager
def bench_database() -> Iterator[BenchDB]:
    home = None
    if not os.environ.get("STACKBENCH_DATABASE_URL"):
        home = Path(tempfile.mkdtemp(prefix="stackbench-bench-"))
        os.environ["STACKBENCH_HOME"] = str(home)
    from stackbench.resultsdb import db, ingest

    try:
        bdb = BenchDB(db.engine(), temporary=home is not None)
        yield bdb
        if home is None and bdb.run_ids:
            with bdb.eng.begin() as conn:
                ingest.delete_runs(conn, bdb.run_ids)
    finally:
        if home is not None:
            from stackbench.resultsdb.embedded import Cluster, destroy

            db.reset()
            destroy(Cluster(home))
            shutil.rmtree(home, ignore_errors=True)
