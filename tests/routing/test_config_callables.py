"""No config value runs code: a config may name only what the project registered (samplers, estimators, TPOT heads,
routers), never a ``module:function``. Each path that once imported and called a named function gets a crafted
payload here; it must be refused with one line naming the key, and must not run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from llmsim.errors import ConfigError
from llmsim.routing import make_router
from llmsim.routing.routebalance.predictors import load_telemetry
from llmsim.routing.samplers import training_sample
from tests.helpers import REPO


def payload(marker: Path) -> dict:
    """What used to run a shell command: a ``module:function`` sampler and keyword arguments for it."""
    return {"sampler": "os:system", "command": f"touch {marker}"}


@pytest.mark.parametrize("router,kwargs,key", [
    ("avengers_pro", lambda p: {"train": p}, "train"),
    ("routebalance", lambda p: {"estimator": "knn", "estimator_kwargs": {"train": p}}, "estimator_kwargs.train"),
    ("routebalance", lambda p: {"tpot_prior": "xgboost", "tpot_kwargs": {"train": p}}, "tpot_kwargs.train"),
])
def test_a_config_cannot_name_a_function(router, kwargs, key, tmp_path) -> None:
    marker = tmp_path / "ran"
    with pytest.raises(ConfigError, match="sampler") as e:
        make_router(router, **kwargs(payload(marker)))
    assert "\n" not in str(e.value) and key.split(".")[0] in str(e.value)
    assert not marker.exists(), "a config value ran a shell command"


@pytest.mark.parametrize("name", ["os:system", "subprocess:run", "builtins:eval", "llmsim.routing.samplers:draw",
                                  "routebalance_workload:x", "", None, 5])
def test_only_registered_sampler_names_resolve(name, tmp_path) -> None:
    marker = tmp_path / "ran"
    with pytest.raises(ConfigError):
        training_sample({"sampler": name, "command": f"touch {marker}"}, "policy.kwargs.train")
    assert not marker.exists()


def test_telemetry_reads_data_files_only(tmp_path) -> None:
    """A telemetry path is read as Parquet or CSV, never unpickled: a pickle file named .csv is just bad data."""
    marker = tmp_path / "ran"
    evil = tmp_path / "telemetry.csv"
    code = (f"import os, pickle\nclass P:\n    def __reduce__(self):\n        return (os.system, ('touch {marker}',))\n"
            f"open({str(evil)!r}, 'wb').write(pickle.dumps(P()))\n")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO, timeout=60)
    with pytest.raises(ConfigError, match="telemetry"):
        load_telemetry(str(evil))
    assert not marker.exists()
