"""Requests streamed to Parquet as they finish (``output.stream: parquet``, ``simulate(stream_to=...)``).

The plain :class:`~llmsim.metrics.recorder.Recorder` keeps every finished request's 14 columns until the end and
the requests table is built from them (with its derived columns and a sorted copy), so a run's memory grows by
several hundred bytes per request. :class:`StreamedRecorder` writes each ``row_group`` finished requests to the
Parquet file as one row group and keeps only what the summary needs, 36 bytes a request: the id and the three
latencies in seconds (TTFT, E2EL, first token to finish) as float64 and the output length as int32; the token,
preemption and truncation totals are running sums. The summary is computed from these in id order with the same
arithmetic as from the table, so ``summary.json`` is byte-identical to the unstreamed run's.

The file's rows are in completion order, not sorted by id; its columns are the requests table's, with ``task`` and
``slo_class`` always present (null when a request has none) so that every row group has one schema.
"""

from __future__ import annotations

import math
from array import array
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from llmsim.errors import ConfigError
from llmsim.metrics.recorder import Latencies, Recorder
from llmsim.metrics.table import rows_frame
from llmsim.request import Request

ROW_GROUP = 65_536
_KEPT = {"id": "q", "ttft_s": "d", "e2el_s": "d", "decode_s": "d", "out": "i"}  # what the summary needs


class StreamedRecorder(Recorder):
    """A recorder that writes finished requests to ``path`` (Parquet) every ``row_group`` rows; see the module."""

    def __init__(self, path: str | Path, row_group: int = ROW_GROUP, key: str = "output.stream") -> None:
        super().__init__()
        self.path = Path(path)
        if self.path.suffix.lower() != ".parquet":  # what the name says is what a reader expects to find there
            raise ConfigError(f"{key}: {str(self.path)!r}: streamed requests are written as Parquet only; name the "
                              f"file *.parquet (got {self.path.suffix or 'no suffix'!r})")
        self.row_group = int(row_group)
        try:
            import pyarrow.parquet  # noqa: F401  (optional dependency: only streamed runs need it)
        except ImportError:
            raise ConfigError(f"{key}: streaming to Parquet needs pyarrow (pip install pyarrow)") from None
        try:
            self.path.open("wb").close()  # a bad path fails now, not after an hour of simulation
        except OSError as e:
            raise ConfigError(f"{key}: cannot write {self.path}: {e.strerror or e}") from None
        self.writer: Any = None
        self.rows_written = 0
        # one growing typed array per column (a big realloc'd block goes back to the system when freed; many
        # chunk arrays would leave the heap fragmented)
        self.kept = {k: array(t) for k, t in _KEPT.items()}
        self.kept_classes: list[np.ndarray | int] = []  # per row group: its classes, or its length before any class
        self.totals = {"input_tokens": 0, "output_tokens": 0, "preemptions": 0, "preempted": 0, "truncated": 0}
        self.start, self.end = math.inf, -math.inf

    def finish(self, r: Request) -> None:
        super().finish(r)
        if len(self.cols["id"]) >= self.row_group:
            self.flush()

    def flush(self) -> None:
        """Write the rows recorded since the last flush as one row group and keep their summary columns."""
        chunk = rows_frame(self.cols, self.tasks, self.slo_classes, labels=True)
        if len(chunk) or self.writer is None:
            self.write(chunk)
        if len(chunk):
            self.keep(chunk)
        self.cols = {k: array(v.typecode) for k, v in self.cols.items()}
        self.tasks = [] if self.tasks is not None else None
        self.slo_classes = [] if self.slo_classes is not None else None

    def write(self, chunk: pd.DataFrame) -> None:
        import pyarrow as pa  # optional dependency (checked in __init__)
        import pyarrow.parquet as pq  # optional dependency

        if self.writer is None:
            schema = pa.Schema.from_pandas(chunk, preserve_index=False)
            for name in ("task", "slo_class"):
                schema = schema.set(schema.get_field_index(name), pa.field(name, pa.string()))
            self.writer = pq.ParquetWriter(self.path, schema)
        table = pa.Table.from_pandas(chunk, schema=self.writer.schema, preserve_index=False)
        self.writer.write_table(table, row_group_size=self.row_group)
        self.rows_written += len(chunk)

    def keep(self, chunk: pd.DataFrame) -> None:
        """The summary's share of a row group: compact columns and running totals."""
        arrival, first, finish = (chunk[c].to_numpy() for c in ("arrival", "first_token", "finish"))
        values = {"id": chunk["id"].to_numpy(), "ttft_s": first - arrival, "e2el_s": finish - arrival,
                  "decode_s": finish - first, "out": chunk["output_tokens"].to_numpy().astype(np.int32)}
        for k, v in values.items():
            self.kept[k].frombytes(memoryview(np.ascontiguousarray(v)).cast("B"))
        labelled = self.slo_classes is not None
        self.kept_classes.append(chunk["slo_class"].to_numpy(object).copy() if labelled else len(chunk))
        t = self.totals
        t["input_tokens"] += int(chunk["prompt_tokens"].sum())
        t["output_tokens"] += int(chunk["output_tokens"].sum())
        t["preemptions"] += int(chunk["preemptions"].sum())
        t["preempted"] += int((chunk["preemptions"] > 0).sum())
        t["truncated"] += int(chunk["truncated"].sum())
        self.start = min(self.start, float(arrival.min()))
        self.end = max(self.end, float(finish.max()))

    def close(self) -> None:
        """Write what is left and close the file (idempotent)."""
        if self.writer is None or self.cols["id"]:
            self.flush()
        if self.writer is not None and self.writer.is_open:
            self.writer.close()

    def latencies(self) -> Latencies:
        """The summary's inputs in id order (closes the file first); each kept column is released once it is
        placed, so the end of a long run needs 16 B a request beyond what was kept."""
        self.close()
        order = np.argsort(np.frombuffer(self.kept.pop("id"), np.int64), kind="stable")
        col = {k: self.in_id_order(k, order) for k in ("out", "ttft_s", "e2el_s", "decode_s")}
        classes = self.classes(order)
        del order
        out, decode = col.pop("out"), col.pop("decode_s")
        multi = out > 1
        itl_sum, n_itl = float(decode[multi].sum()), int(np.sum(out[multi], dtype=np.int64)) - int(multi.sum())
        den = out - 1
        np.maximum(den, 1, out=den)
        decode *= 1e3  # in place: the same values as the table's (finish - first_token) * 1e3 / (out - 1)
        decode /= den
        decode[~multi] = np.nan
        del den, out
        ttft, e2el = col.pop("ttft_s"), col.pop("e2el_s")
        ttft *= 1e3
        e2el *= 1e3
        t = self.totals
        return Latencies(n_done=len(ttft), start=self.start, end=self.end, input_tokens=t["input_tokens"],
                         output_tokens=t["output_tokens"], ttft_ms=ttft, tpot_ms=decode, e2el_ms=e2el,
                         itl_sum_s=itl_sum, n_itl=n_itl, preemptions=t["preemptions"], preempted=t["preempted"],
                         truncated=t["truncated"], slo_class=classes)

    def in_id_order(self, name: str, order: np.ndarray) -> np.ndarray:
        """Kept column ``name`` in id order; the kept copy is released."""
        kept = self.kept.pop(name)
        return np.frombuffer(kept, np.int32 if name == "out" else np.float64)[order]

    def classes(self, order: np.ndarray) -> np.ndarray | None:
        """The SLO classes in id order, None when no request has one."""
        parts, self.kept_classes = self.kept_classes, []
        if not any(isinstance(p, np.ndarray) for p in parts):
            return None
        full = [p if isinstance(p, np.ndarray) else np.full(p, None, dtype=object) for p in parts]
        return np.concatenate(full)[order]

    def empty_frame(self) -> pd.DataFrame:
        """The requests table's columns with no rows (the rows are in the file)."""
        return rows_frame({k: array(v.typecode) for k, v in self.cols.items()}, self.tasks, self.slo_classes)
