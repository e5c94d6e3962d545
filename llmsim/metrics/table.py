"""The requests table (``SimResult.requests``, ``requests.csv``) built from a recorder's typed columns: the recorded
columns as int64 / float64, ``truncated`` as booleans and the derived latencies in milliseconds.

A run's result keeps the recorded rows (:class:`RecordedRows`, references to the columns) and builds the table the
first time it is read: on a million requests the table costs about twice the columns, and a caller that wants only
the summary never pays for it."""

from __future__ import annotations

from array import array
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

TABLE_COLUMNS = ("id", "arrival", "prompt_tokens", "output_tokens", "requested_output_tokens", "instance",
                 "routed_time", "first_scheduled", "first_token", "finish", "preemptions", "swaps", "truncated",
                 "cached_tokens")  # the requests table's recorded columns, in its order


@dataclass(frozen=True)
class RecordedRows:
    """The first ``n`` rows of a recorder's columns and labels (references, no copy: the recorder may go on
    appending, and the rows after the first ``n`` are not these)."""

    cols: dict[str, array]
    n: int
    tasks: list[str | None] | None
    slo_classes: list[str | None] | None

    def frame(self) -> pd.DataFrame:
        """The requests table of these rows in id order (as a stable sort by id orders it). Each column is read
        into that order from the recorded ones directly, so the table costs little more memory than its own columns
        (the recorded columns, a copy, a sorted copy and the derived columns' temporaries cost 2.5 times that)."""
        cols, n = self.cols, self.n
        order = np.argsort(np.frombuffer(cols["id"], np.int64, count=n), kind="stable")
        data: dict[str, Any] = {k: column_values(cols[k], order) for k in TABLE_COLUMNS}
        for name, labels in (("task", self.tasks), ("slo_class", self.slo_classes)):
            if labels is not None:  # (the dtype pandas infers for the whole list, then in id order)
                rows = labels if len(labels) == n else labels[:n]
                data[name] = pd.Series(rows).take(order).reset_index(drop=True)
        del order
        return with_latencies(pd.DataFrame(data, copy=False))


def rows_frame(cols: dict[str, array], tasks: list[str | None] | None, slo_classes: list[str | None] | None,
               labels: bool = False) -> pd.DataFrame:
    """The requests table of recorded columns, in recording order (``labels``: the task and slo_class columns
    even when no request has one, so that streamed row groups share one schema)."""
    data: dict[str, Any] = {k: column_values(v) for k, v in cols.items()}
    df = pd.DataFrame(data)
    df = df[list(TABLE_COLUMNS)]
    if tasks is not None or labels:
        df["task"] = tasks
    if slo_classes is not None or labels:
        df["slo_class"] = slo_classes
    return with_latencies(df)


def column_values(col: array, order: np.ndarray | None = None) -> np.ndarray:
    """A recorded column as a fresh float64 or int64 array (whatever its typecode), optionally in ``order``."""
    values = np.frombuffer(col, dtype=col.typecode)
    if order is not None:
        values = values[order]
    return values.astype(np.float64 if col.typecode == "d" else np.int64, copy=order is None)


def with_latencies(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` (the recorded columns) with ``truncated`` as booleans and the derived latency columns."""
    df["truncated"] = df["truncated"].astype(bool)
    df["ttft_ms"] = (df["first_token"] - df["arrival"]) * 1e3
    df["e2el_ms"] = (df["finish"] - df["arrival"]) * 1e3
    out = df["output_tokens"]
    df["tpot_ms"] = np.where(out > 1, (df["finish"] - df["first_token"]) * 1e3 / (out - 1).clip(lower=1), np.nan)
    df["queue_ms"] = (df["first_scheduled"] - df["arrival"]) * 1e3
    return df
