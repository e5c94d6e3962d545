"""``llmsim-reproduce``: the paper reproductions live in a source checkout's ``experiments/`` (not in the wheel);
this launcher finds them beside the package and runs them, or says in one line what is needed."""

from __future__ import annotations

import sys

from llmsim.resources import experiments_dir


def main() -> None:
    """Run ``experiments.reproduce`` of the checkout this package was installed from (editable install)."""
    root = experiments_dir()
    if root is None:
        print("llmsim-reproduce: error: the reproductions live in the source checkout's experiments/ folder, which "
              "an installed wheel does not ship; run it from a checkout: git clone <llmsim repository> && "
              "pip install -e '.[rl]' && llmsim-reproduce --help", file=sys.stderr)
        raise SystemExit(2)
    if str(root.parent) not in sys.path:
        sys.path.insert(0, str(root.parent))
    from experiments.reproduce import main as run  # optional: only in a source checkout (found above)

    raise SystemExit(run())
