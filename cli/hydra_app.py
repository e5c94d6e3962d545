"""What every Hydra command of llmsim shares (``llmsim``, ``llmsim-train``, ``llmsim-capacity``, ...): the config
directory, one-line errors with exit status 2, a quiet exit when the reader of stdout leaves, and the
``${llmsim_presets:GROUP}`` resolver that ``--help`` texts use to list a group's presets."""

from __future__ import annotations

import os
import shutil
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import hydra
import yaml
from hydra.core.hydra_config import HydraConfig
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from llmsim.errors import LLMSimError, yaml_error_line
from llmsim.resources import conf_dir


def presets(group: str) -> str:
    """The options of a config group, "a100x4, hetero, ...": conf/<group>/*.yaml, for ``--help`` (wrapped to 100
    columns, continuation lines indented under the first option)."""
    names = ", ".join(sorted(p.stem for p in (conf_dir() / group).glob("*.yaml"))) or "(none)"
    return textwrap.fill(names, width=90, subsequent_indent=" " * 10, break_on_hyphens=False)


HYDRA_FILES = (".hydra/config.yaml", ".hydra/hydra.yaml", ".hydra/overrides.yaml")

# `${llmsim_presets:GROUP}` in conf/config.yaml's hydra.help.template (resolved only when the help is printed)
OmegaConf.register_new_resolver("llmsim_presets", presets, replace=True)


def one_line(e: BaseException) -> str:
    """OmegaConf errors span several lines (key, type, full key); llmsim's errors are one line already."""
    return " ".join(str(e).split())


def slurm_missing(argv: list[str]) -> str | None:
    """A sweep on the ``slurm`` launcher where no ``srun`` is found: submitit would fail inside the launcher, after
    composing the config, with a traceback; say it in one line and name the launcher that runs locally."""
    if "hydra/launcher=slurm" not in argv or not {"-m", "--multirun"} & set(argv) or shutil.which("srun"):
        return None
    return ("hydra/launcher=slurm: no srun on PATH (not a Slurm node); run the sweep from a Slurm login node, or "
            "try the same submitit path locally with hydra/launcher=slurm_local (docs/scale-out.md)")


def quiet_on_closed_pipe(fn: Callable[[], None], prog: str = "llmsim") -> None:
    """Run the Hydra app ``fn``. A bad override or config (an unknown key, a value of the wrong type, a file that
    is not YAML or gives a key twice) is one line ``prog: error: ...`` with exit status 2, as llmsim's own errors
    are, not Hydra's multi-line report; when the reader of stdout has left (``llmsim --help | head``), exit 1
    without a traceback."""
    os.environ.setdefault("HYDRA_FULL_ERROR", "1")  # Hydra raises instead of printing its report and exiting 1
    missing = slurm_missing(sys.argv[1:])
    if missing:
        print(f"{prog}: error: {missing}", file=sys.stderr)
        raise SystemExit(2)
    try:
        fn()
    except (HydraException, OmegaConfBaseException) as e:
        print(f"{prog}: error: {one_line(e)}", file=sys.stderr)
        raise SystemExit(2) from None
    except yaml.YAMLError as e:  # a config file that is not YAML, or gives a key twice (OmegaConf refuses that)
        print(f"{prog}: error: {yaml_error_line(e)}", file=sys.stderr)
        raise SystemExit(2) from None
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise SystemExit(1) from None
    except ValueError as e:  # Hydra's check of its mode flags, raised before any config is composed
        if not str(e).startswith("Only one of --run"):
            raise
        print(f"{prog}: error: only one of --run, --multirun, --cfg, --info and --shell_completion can be given "
              "(-m runs a sweep, --cfg prints one composed config)", file=sys.stderr)
        raise SystemExit(2) from None


def remove_if_empty(d: Path) -> bool:
    """``rmdir``: True if ``d`` was an empty directory and is gone."""
    try:
        d.rmdir()
    except OSError:  # not empty, or not there
        return False
    return True


def discard_run_dir(out: Path) -> None:
    """After a failed run: remove what Hydra put in the run directory (its ``.hydra/`` record and an empty job log),
    then the directory if that empties it, and its parents that are left empty below the working directory
    (``outputs/<date>/``). Nothing else is deleted: a directory that held anything else stays."""
    for rel in HYDRA_FILES:
        (out / rel).unlink(missing_ok=True)
    for log in out.glob("*.log"):
        if log.is_file() and log.stat().st_size == 0:
            log.unlink()
    remove_if_empty(out / ".hydra")
    if not remove_if_empty(out):
        return
    cwd = Path.cwd().resolve()
    for d in out.resolve().parents:
        if d == cwd or not d.is_relative_to(cwd) or not remove_if_empty(d):
            break


def run_hydra_app(config_name: str, prog: str, body: Callable[[dict, str], None]) -> None:
    """A console app over conf/<config_name>.yaml: ``body(plain config, run directory)``. Config and llmsim errors
    print one line ``prog: error: ...`` and exit 2; a closed pipe exits 1; a run that fails leaves no folder of its
    own behind (:func:`discard_run_dir`)."""

    @hydra.main(version_base="1.3", config_path=str(conf_dir()), config_name=config_name)
    def _main(cfg: DictConfig) -> None:
        out_dir = HydraConfig.get().runtime.output_dir
        try:
            body(OmegaConf.to_container(cfg, resolve=True), out_dir)  # type: ignore[arg-type]
        except (LLMSimError, OmegaConfBaseException) as e:
            discard_run_dir(Path(out_dir))
            print(f"{prog}: error: {one_line(e)}", file=sys.stderr)
            raise SystemExit(2) from None
        except BaseException:
            discard_run_dir(Path(out_dir))
            raise

    quiet_on_closed_pipe(_main, prog)
