"""Skewed decode batches: the ``decode_skew`` part, fitted from LLMServingSim's ``skew.csv`` operator tables.

``skew.csv`` times one layer's attention for batches of ``n`` decodes of which ``nb`` are long (``kv_big``) and
the rest short (``kvs``), with and without a prefill chunk of ``pc`` tokens (over ``kp`` cached ones): measured
(``t_skew_us``), every decode at the mean context (``t_mean_us``) and every decode at ``kv_big`` (``t_max_us``).
LLMServingSim blends ``t_mean + alpha * (t_max - t_mean)`` with an ``alpha`` per bucket of (pc, n, skew rate,
kv_big, kp) (``skew_fit.csv``). Ours is three coefficients (llmsim.perf.decode_skew), fitted here by least squares
on the relative error of ``t_skew``:

* decode-only (``pure``): one constant; the tables show no trend in n, ratio or kv_big (alpha about 0.03);
* with a prefill chunk (``mixed``): ``alpha = mixed * skew_rate + mixed_per_inv_n / n``. The long sequences' share
  (``nb / n``) and a small batch (few decodes behind the chunk) are what raise alpha; kv_big, pc and kp add
  little once those two are in (docs/profiles.md, held-out table).

:func:`heldout` is the validation: predicted ``t_skew`` against measured, one ``kv_big`` level (or one table) left
out of the fit, beside the uncorrected ``t_mean``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from llmsim.perf.decode_skew import KEYS

from .base import Context, PartResult, provider
from .fits import sig
from .raw import lss_measured, lss_run_dir, lss_source

COLUMNS = ("regime", "n", "nb", "kv_big", "t_mean_us", "t_max_us", "t_skew_us")


def read_skew(path: Path) -> pd.DataFrame:
    """skew.csv with the columns the fit needs checked; ``sr`` (the long sequences' share, nb / n) added."""
    df = pd.read_csv(path)
    missing = [c for c in COLUMNS if c not in df.columns]
    if missing:
        raise ValueError(f"{path}: missing column(s) {', '.join(missing)}")
    return df.assign(sr=df.nb / df.n)


def _features(df: pd.DataFrame) -> np.ndarray:
    """Per row, the (pure, mixed, mixed_per_inv_n) coefficients' share of ``t_skew - t_mean``."""
    mixed = (df.regime.to_numpy() == "mixed").astype(float)
    dx = (df.t_max_us - df.t_mean_us).to_numpy()
    return np.stack([(1 - mixed) * dx, mixed * df.sr.to_numpy() * dx, mixed * dx / df.n.to_numpy()], 1)


def fit_skew(df: pd.DataFrame) -> dict[str, float]:
    """The three coefficients minimising the squared relative error of the predicted ``t_skew``."""
    w = 1.0 / df.t_skew_us.to_numpy()
    a = _features(df) * w[:, None]
    b = (df.t_skew_us - df.t_mean_us).to_numpy() * w
    coef = np.linalg.lstsq(a, b, rcond=None)[0]
    return {k: float(sig(float(c))) for k, c in zip(KEYS, coef)}


def predict_t_skew(df: pd.DataFrame, coef: dict[str, float] | None) -> np.ndarray:
    """``t_mean + alpha * (t_max - t_mean)`` per row with alpha clamped to [0, 1]; ``coef`` None: ``t_mean``."""
    t_mean = df.t_mean_us.to_numpy()
    if coef is None:
        return t_mean
    dx = (df.t_max_us - df.t_mean_us).to_numpy()
    mixed = df.regime.to_numpy() == "mixed"
    alpha = np.where(mixed, coef["mixed"] * df.sr.to_numpy() + coef["mixed_per_inv_n"] / df.n.to_numpy(),
                     coef["pure"])
    return t_mean + np.clip(alpha, 0.0, 1.0) * dx


def rel_errors(df: pd.DataFrame, pred: np.ndarray) -> np.ndarray:
    return np.abs(pred - df.t_skew_us.to_numpy()) / df.t_skew_us.to_numpy()


def heldout(df: pd.DataFrame, by: str = "kv_big") -> pd.DataFrame:
    """Mean and p90 relative error of ``t_skew`` (percent) per regime, each value of ``by`` predicted by a fit on
    the other rows, beside the uncorrected model (``t_mean``)."""
    err = np.zeros(len(df))
    for v in df[by].unique():
        test = (df[by] == v).to_numpy()
        err[test] = rel_errors(df[test], predict_t_skew(df[test], fit_skew(df[~test])))
    base = rel_errors(df, predict_t_skew(df, None))
    rows = []
    for regime in ("pure", "mixed"):
        sel = (df.regime == regime).to_numpy()
        rows.append({"regime": regime, "rows": int(sel.sum()),
                     "none_mean": 100 * base[sel].mean(), "none_p90": 100 * np.quantile(base[sel], 0.9),
                     "fit_mean": 100 * err[sel].mean(), "fit_p90": 100 * np.quantile(err[sel], 0.9)})
    return pd.DataFrame(rows)


def skew_csv(ctx: Context) -> Path | None:
    """The skew.csv of this (GPU, model, TP), when LLMServingSim's profiler measured one."""
    if not lss_measured(ctx.gpu, ctx.model.name, ctx.tp):
        return None
    f = lss_run_dir(ctx.raw.root, ctx.gpu, ctx.model.name, ctx.tp) / "skew.csv"
    return f if f.is_file() else None


@provider("llmservingsim")
def lss_skew(ctx: Context) -> PartResult | None:
    """The coefficients fitted on this table's skew.csv, with its held-out error in the source line."""
    f = skew_csv(ctx)
    if f is None:
        return None
    df = read_skew(f)
    ho = heldout(df).set_index("regime")
    err = "; ".join(f"{r} t_skew error {ho.at[r, 'fit_mean']:.1f}% (uncorrected {ho.at[r, 'none_mean']:.1f}%)"
                    for r in ("pure", "mixed"))
    src = (f"{lss_source(ctx.gpu, ctx.model.name, ctx.tp)} skew.csv ({len(df)} skewed batches): alpha of "
           f"t_max - t_mean by regime, least squares on relative error; leave-one-kv_big-out mean {err}")
    return PartResult(fit_skew(df), "measured", src, frozenset({"llmservingsim"}))


@provider("no-skew-table")
def no_skew(ctx: Context) -> PartResult:
    """No skew measurements: no ``decode_skew`` part (the summed-context model alone)."""
    return PartResult(None, "measured", "no skew table")


CHAIN = (lss_skew, no_skew)
