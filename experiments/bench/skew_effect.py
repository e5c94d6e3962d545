"""The skewed-decode term's effect on replayed latencies: a ShareGPT-like synthetic workload (ShareGPT request
lengths from ../shared/traces/sharegpt_lengths, Poisson arrivals) replayed with ``python -m llmsim.profiles replay``
with and without ``--no-decode-skew``, for the profiles that have the term.

    python -m experiments.bench skew [--requests 1000] [--seed 0] [--json]

Prints mean and p90 TTFT / TPOT / E2E (ms) with and without the term, and the difference in percent, per
(model, GPU, TP, arrival rate). The workload CSVs are written to a temporary directory (or ``--out DIR``).
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

from experiments.harness.timing import positive_int
from llmsim.profiles.replay import add_arguments, replay_from_args

LENGTHS = Path(__file__).resolve().parents[2].parent / "shared/traces/sharegpt_lengths" / \
    "sharegpt_8k_filtered_stats_llama2_tokenizer.csv"
# (model, GPU, TP, arrival rates in requests/s): a moderate and a heavy load for each
CASES = [("qwen3-32b", "rtx-pro-6000", 2, (1.0, 2.0)), ("llama-3.1-8b", "rtx4090", 1, (0.4, 0.55))]
METRICS = ("mean_ttft_ms", "p90_ttft_ms", "mean_tpot_ms", "p90_tpot_ms", "mean_e2el_ms", "p90_e2el_ms")


def workload(path: Path, n: int, rate: float, seed: int) -> Path:
    """``n`` ShareGPT (prompt, output) pairs drawn with replacement, Poisson arrivals at ``rate``, as a replay CSV."""
    lengths = pd.read_csv(LENGTHS)
    rng = np.random.default_rng(seed)
    rows = lengths.iloc[rng.integers(0, len(lengths), n)]
    arrival = np.cumsum(rng.exponential(1.0 / rate, n))
    pd.DataFrame({"arrival": arrival - arrival[0], "prompt_tokens": rows.num_prefill_tokens.to_numpy(),
                  "output_tokens": rows.num_decode_tokens.to_numpy()}).to_csv(path, index=False)
    return path


def replay(csv: Path, model: str, gpu: str, tp: int, skew: bool) -> dict[str, float]:
    """The replay command's ``--json`` rows as {metric: simulated}."""
    ap = argparse.ArgumentParser()
    add_arguments(ap)
    argv = ["--requests", str(csv), "--model", model, "--gpu", gpu, "--tp", str(tp)]
    rows, _, _ = replay_from_args(ap.parse_args(argv + ([] if skew else ["--no-decode-skew"])))
    return {r["metric"]: r["simulated"] for r in rows}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m experiments.bench skew", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=positive_int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=None, help="directory for the workload CSVs (default: temporary)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        out = a.out or Path(tmp)
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            ap.error(f"--out {out}: not a directory we can write ({e.strerror})")
        for model, gpu, tp, rates in CASES:
            for rate in rates:
                csv = workload(out / f"sharegpt-{a.requests}-{rate:g}rps-seed{a.seed}.csv", a.requests, rate, a.seed)
                on, off = replay(csv, model, gpu, tp, True), replay(csv, model, gpu, tp, False)
                rows = [{"model": model, "gpu": gpu, "tp": tp, "rate": rate, "metric": k, "with_skew": on[k],
                         "without": off[k], "diff_pct": round(100 * (on[k] / off[k] - 1), 2)} for k in METRICS]
                for r in rows:
                    print(json.dumps(r) if a.json else
                          f"{model:<13}{gpu:<13}tp{tp} {rate:>4g}/s {r['metric']:<14}{r['without']:>10.1f}"
                          f"{r['with_skew']:>10.1f}{r['diff_pct']:>+8.2f}%")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
