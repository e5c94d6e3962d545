"""``python -m llmsim.cli.report MULTIRUN_DIR [--x KEY]`` (the command ``llmsim -m ...`` prints at its end): a
multirun of ``llmsim`` as ``sweep.csv`` (one column per override key, then the summary metrics) and ``sweep.png``
(one curve per combination of the swept keys but x), the table printed too. Everything a notebook reads of a sweep
is importable from here."""

from __future__ import annotations

import argparse
import sys

from llmsim.cli.sweep import Sweep, collect_sweep, sweep_table, swept_keys
from llmsim.cli.sweep_plot import plot_sweep, save_sweep, sweep_figure
from llmsim.errors import LLMSimError

__all__ = ["Sweep", "collect_sweep", "main", "plot_sweep", "save_sweep", "sweep_figure", "sweep_table", "swept_keys"]


def main(argv: list[str] | None = None) -> int:
    """``python -m llmsim.cli.report SWEEP_DIR [--x KEY]``; errors are one line on stderr, exit status 2."""
    ap = argparse.ArgumentParser(
        prog="python -m llmsim.cli.report",
        description="Collect a Hydra multirun of llmsim (llmsim -m ...) into sweep.csv (one column per override "
                    "key, then the summary metrics) and sweep.png (one curve per value of each swept key but x).")
    ap.add_argument("sweep_dir", help="the multirun directory, e.g. multirun/2025-01-31/12-00-00")
    ap.add_argument("--x", default=None, help="swept key for the x axis (default: workload.rate if swept, else the "
                                              "first numeric swept key)")
    args = ap.parse_args(argv)
    try:
        sweep = collect_sweep(args.sweep_dir)
        csv, png, x = save_sweep(sweep, args.sweep_dir, args.x)
    except LLMSimError as e:
        print(f"llmsim.cli.report: error: {e}", file=sys.stderr)
        return 2
    print(sweep_table(sweep, x))
    swept = sweep.swept
    if x is None:
        print("nothing was swept (every job has the same overrides): no plot")
    else:
        by = [k for k in swept if k != x]
        print(f"x axis: {x}; curves: {', '.join(by) if by else 'one'}")
    print(f"wrote {csv}" + (f" and {png}" if png else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
