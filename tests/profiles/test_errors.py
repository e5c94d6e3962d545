"""Clear one-line errors: measuring without CUDA / torch, --from-raw with a missing or malformed meta.yaml, absent
raw data, and profile YAMLs with all-zero coefficient groups."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from unittest.mock import patch

import pytest
import yaml

from llmsim.errors import ProfileError
from llmsim.perf.profile_table import load_profile_file
from llmsim.profiles.cli import main
from tests.helpers import REPO
from tests.profiles.helpers import DATA, tiny_raw


def _one_clear_line(stderr: str, needle: str) -> None:
    assert "Traceback" not in stderr, stderr
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, stderr
    assert needle in lines[0], stderr


def _run(args: list[str], **env: str) -> subprocess.CompletedProcess:
    """``python -m llmsim.profiles ARGS`` in a fresh process."""
    return subprocess.run(
        [sys.executable, "-m", "llmsim.profiles", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(REPO), **env},
    )


# ------------------------------------------------------------------------------------------- measure
@pytest.mark.slow  # ~15 s: a fresh process importing torch
def test_measure_without_cuda_is_one_line(tmp_path) -> None:
    pytest.importorskip("torch")
    out = tmp_path / "raw"
    args = ["measure", "--model", "opt-125m", "--device", "cuda", "--out", str(out), "--quick"]
    p = _run(args, CUDA_VISIBLE_DEVICES="")
    assert p.returncode == 2
    _one_clear_line(p.stderr, "CUDA is not available")
    assert not out.exists()


def test_measure_without_torch_or_bad_model(monkeypatch, capsys, tmp_path) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch -> ImportError
    assert main(["measure", "--model", "opt-125m", "--device", "cpu", "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    _one_clear_line(err, "PyTorch is needed")
    assert "pip install 'llmsim[rl]'" in err  # the missing extra is named
    assert main(["measure", "--model", "no-such-model", "--device", "cpu"]) == 2
    _one_clear_line(capsys.readouterr().err, "unknown model 'no-such-model'")
    cfg = tmp_path / "config.json"
    cfg.write_text("{not json")
    assert main(["measure", "--model", str(cfg), "--device", "cpu"]) == 2
    _one_clear_line(capsys.readouterr().err, "config.json")


@pytest.mark.parametrize("flag,value", [("--iters", "0"), ("--repeats", "-2"), ("--max-tokens", "-5"),
                                        ("--max-batch", "x")])
def test_measure_refuses_a_count_below_one(flag, value, tmp_path, capsys) -> None:
    """0 silently became the default and a negative count timed nothing; both are a usage error naming the flag."""
    with pytest.raises(SystemExit) as e:
        main(["measure", "--model", "opt-125m", "--device", "cpu", "--out", str(tmp_path / "x"), flag, value])
    assert e.value.code == 2
    assert f"argument {flag}: expected an integer >= 1, got '{value}'" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


# ----------------------------------------------------------------------------------- build --from-raw
def _edit(f: Path, old: str, new: str) -> None:
    """Replace the first ``old`` of a table (it must be there, or the test would check nothing)."""
    text = f.read_text()
    assert old in text, (f, old)
    f.write_text(text.replace(old, new, 1))


def _meta_missing(d: Path) -> None:
    (d / "meta.yaml").unlink()


@pytest.mark.parametrize(
    "name,breakit,needle",
    [
        ("missing", _meta_missing, "meta.yaml is missing"),
        ("not_yaml", lambda d: (d / "meta.yaml").write_text("model: [llama\ngpu: a10\n"), "not valid YAML"),
        ("list", lambda d: (d / "meta.yaml").write_text("- a\n- b\n"), "expected a mapping, got list"),
        ("no_gpu", lambda d: (d / "meta.yaml").write_text("model: llama-2-7b\n"), "key 'gpu' missing"),
        ("bad_gpu", lambda d: (d / "meta.yaml").write_text("model: llama-2-7b\ngpu: nope\n"), "unknown GPU 'nope'"),
        ("no_shape", lambda d: (d / "meta.yaml").write_text("model: my-model\ngpu: a10\n"), "no complete 'shape'"),
        ("no_csv", lambda d: (d / "attention.csv").unlink(), "attention.csv is missing"),
        ("bad_csv", lambda d: (d / "dense.csv").write_text("a,b\n1,2\n"), "cannot build a profile"),
        ("nan_time", lambda d: _edit(d / "dense.csv", ",5.1\n", ",nan\n"),
         "dense.csv: line 2: time_us: expected a finite"),
        ("neg_time", lambda d: _edit(d / "attention.csv", "0,0,1,16,", "0,0,1,16,-"), "attention.csv: line 8: time_us"),
        ("cut_row", lambda d: _edit(d / "dense.csv", "layer,tokens,time_us\n", "layer,tokens,time_us\nembedding,4\n"),
         "dense.csv: line 2: time_us: expected a finite number > 0 (microseconds), got ''"),
        ("empty_csv", lambda d: (d / "dense.csv").write_text(""), "dense.csv: not a readable CSV"),
        ("header_only", lambda d: (d / "per_sequence.csv").write_text("layer,sequences,time_us\n"),
         "per_sequence.csv: no rows after the header"),
        ("no_lm_head", lambda d: (d / "per_sequence.csv").write_text("layer,sequences,time_us\nsampler,1,3\n"),
         "per_sequence.csv: no 'lm_head' row"),
    ],
)
def test_from_raw_bad_input_is_one_line(name, breakit, needle, tmp_path, capsys) -> None:
    raw = tmp_path / name
    tiny_raw(raw)
    breakit(raw)
    assert main(["build", "--from-raw", str(raw), "--out", str(tmp_path / "out")]) == 2
    _one_clear_line(capsys.readouterr().err, needle)
    assert not (tmp_path / "out").exists()


def test_from_raw_malformed_meta_process_exit(tmp_path) -> None:
    tiny_raw(tmp_path / "raw")
    (tmp_path / "raw" / "meta.yaml").write_text("model: llama-2-7b\ngpu: a10\n  tp: [\n")
    p = _run(["build", "--from-raw", str(tmp_path / "raw"), "--out", str(tmp_path / "out")])
    assert p.returncode == 2
    _one_clear_line(p.stderr, "meta.yaml: not valid YAML at line")


# ------------------------------------------------------------------------------------------ raw data
@pytest.mark.parametrize("verb", ["build", "validate", "estimate"])
def test_absent_raw_data_is_one_line(verb, tmp_path, capsys) -> None:
    """Outside the dev workspace ../shared/profiles_raw is absent: the verbs that derive from it say so."""
    assert main([verb, "--raw", str(tmp_path / "nope")]) == 2
    _one_clear_line(capsys.readouterr().err, f"python -m llmsim.profiles {verb}: error: --raw {tmp_path / 'nope'}")


@pytest.mark.parametrize("verb,missing", [("build", "vidur"), ("validate", "llm-inference-bench"),
                                          ("estimate", "aiconfigurator")])
def test_incomplete_raw_data_is_one_line(verb, missing, tmp_path, capsys) -> None:
    """An empty or partial copy of profiles_raw names the missing source folder instead of a FileNotFoundError."""
    assert main([verb, "--raw", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    _one_clear_line(err, f"python -m llmsim.profiles {verb}: error: --raw {tmp_path}: source folder(s) ")
    assert missing in err


def test_unwritable_output_is_one_line(tmp_path, capsys) -> None:
    """An output path under a file (or without permission) is one line naming the path, exit 2."""
    blocker = tmp_path / "afile"
    blocker.write_text("")
    out = blocker / "profiles"
    argv = ["estimate", "--raw", str(DATA), "--profile-out", str(out), "--model", "llama-3.1-8b", "--gpu", "a10"]
    with patch("llmsim.profiles.estimate_report.check_raw_dir"), \
            patch("llmsim.profiles.estimate_report.calibrated_doc", return_value={}):
        assert main(argv) == 2
    err = capsys.readouterr().err
    _one_clear_line(err, f"python -m llmsim.profiles estimate: error: {out / 'a10'}: Not a directory")


# ---------------------------------------------------------------------------------- profile YAML values
@pytest.mark.parametrize(
    "key,zero",
    [
        ("dense.seconds", lambda d: d["dense"].__setitem__("seconds", [0.0] * len(d["dense"]["seconds"]))),
        ("lm_head.seconds", lambda d: d["lm_head"].__setitem__("seconds", [0] * len(d["lm_head"]["seconds"]))),
        ("prefill_attention", lambda d: d.__setitem__("prefill_attention", {"fixed": 0.0, "c2": 0.0, "cp": 0})),
        (
            "decode_attention",
            lambda d: d.__setitem__("decode_attention", {"fixed": 0.0, "per_seq": 0.0, "per_ctx_token": 0.0}),
        ),
        ("overhead", lambda d: d.__setitem__("overhead", {"per_iteration": 0.0, "per_seq": 0.0})),
    ],
)
def test_profile_yaml_all_zero_rejected(key, zero, tmp_path) -> None:
    doc = yaml.safe_load((DATA / "a100-80gb" / "llama-2-7b.yaml").read_text())
    zero(doc)
    f = tmp_path / "zero.yaml"
    f.write_text(yaml.safe_dump(doc))
    with pytest.raises(ProfileError, match=rf"zero.yaml: key '{key}': .*zero") as e:
        load_profile_file(f)
    assert "\n" not in str(e.value)


def test_profile_yaml_some_zero_coefficients_accepted(tmp_path) -> None:
    doc = yaml.safe_load((DATA / "a100-80gb" / "llama-2-7b.yaml").read_text())
    doc["prefill_attention"]["fixed"] = 0.0
    doc["overhead"]["per_seq"] = 0
    f = tmp_path / "ok.yaml"
    f.write_text(yaml.safe_dump(doc))
    assert load_profile_file(f).step_time(16, 1, 256, 0, 0, 0) > 0


def test_a_profile_path_that_is_a_directory_says_so(tmp_path) -> None:
    """A directory was reported as a file that "does not exist"."""
    with pytest.raises(ProfileError) as e:
        load_profile_file(tmp_path)
    assert str(e.value) == (f"profile file {tmp_path}: is a directory; expected a profile YAML file "
                            "(<gpu>/<model>[-tpN].yaml)")
    with pytest.raises(ProfileError, match="does not exist"):
        load_profile_file(tmp_path / "a100" / "llama-3.1-8b.yaml")


@pytest.mark.parametrize("plot, message", [
    ("{tmp}", "{tmp}: is a directory; expected an image file name (timeline.png)"),
    ("{tmp}/timeline.pngx", "{tmp}/timeline.pngx: expected an image file name ending in one of ."),
    ("{tmp}/timeline", "{tmp}/timeline: expected an image file name ending in one of"),
    ("{tmp}/a_file/timeline.png", "{tmp}/a_file/timeline.png: cannot write a file in {tmp}/a_file (Not a directory)"),
])
def test_replay_checks_its_plot_path_before_the_run(plot, message, tmp_path, capsys) -> None:
    """A --plot that could not be written failed after the whole replay (a traceback for an unknown format; a name
    without a suffix was written with .png added, and reported without it)."""
    (tmp_path / "a_file").write_text("")
    argv = ["replay", "--requests", str(tmp_path / "no_such_run.jsonl"), "--model", "llama-3.1-8b", "--gpu",
            "rtx-pro-6000", "--plot", plot.format(tmp=tmp_path)]
    with pytest.raises(SystemExit) as e:
        main(argv)
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert e.value.code == 2 and f"replay: error: argument --plot: {message.format(tmp=tmp_path)}" in err, err
