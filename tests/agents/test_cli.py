"""llmsim-train / llmsim-evaluate / llmsim-export without their extras: one line naming the pip command, exit 2."""

from __future__ import annotations

import subprocess
import sys

import pytest

from llmsim.agents.cli import NEEDS, missing
from tests.helpers import REPO

# hide a package from the child process: ``import torch`` fails and importlib.util.find_spec("torch") is None
HIDE = "import sys\nfor m in {hide!r}: sys.modules[m] = None\nsys.argv = [{prog!r}, '--help']\n" \
       "from llmsim.agents import cli\ncli.{fn}()\n"


@pytest.mark.parametrize("prog,fn,hide,extras", [
    ("llmsim-train", "train", ["torch"], "rl"),
    ("llmsim-evaluate", "evaluate", ["gymnasium"], "rl"),
    ("llmsim-export", "export", ["onnx", "onnxruntime"], "export"),
    ("llmsim-export", "export", ["torch", "onnx"], "export,rl"),
])
def test_missing_extra_is_one_line_naming_pip(prog: str, fn: str, hide: list[str], extras: str) -> None:
    code = HIDE.format(hide=hide, prog=prog, fn=fn)
    p = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert p.returncode == 2, p.stderr
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, p.stderr
    assert lines[0].startswith(f"{prog}: error: ") and f"pip install 'llmsim[{extras}]'" in lines[0]
    assert all(m in lines[0] for m in hide) and p.stdout == ""


def test_every_command_lists_what_it_needs() -> None:
    assert set(NEEDS) == {"llmsim-train", "llmsim-evaluate", "llmsim-export"}
    assert all(extra in ("rl", "export") for deps in NEEDS.values() for _, extra in deps)
    pytest.importorskip("torch")
    assert missing("llmsim-train") == []


def test_evaluate_runs_heuristics_without_torch_and_asks_for_it_for_a_checkpoint(tmp_path) -> None:
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "checkpoint.json").write_text('{"format": 1}')  # read before any network is loaded
    code = ("import sys\nsys.modules['torch'] = None\nfrom llmsim.agents.evaluate import evaluate\n"
            "from llmsim.errors import ConfigError\nenv = {'id': 'workload_router', 'num_requests': 12}\n"
            "print(len(evaluate(env, ['jsq'], [1000])))\n"
            f"try:\n    evaluate(env, [{{'checkpoint': {str(tmp_path / 'ckpt')!r}}}], [1000])\n"
            "except ConfigError as e:\n    print(e)\n")
    p = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    rows, err = p.stdout.strip().splitlines()
    assert rows == "1" and "pip install 'llmsim[rl]'" in err and "baselines alone run without it" in err
