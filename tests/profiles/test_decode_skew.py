"""The ``decode_skew`` part: fitted from LLMServingSim's skew.csv (llmsim.profiles.providers.skew), committed in the
profiles that have such a table and in no other, and refused in one line when broken."""

from __future__ import annotations

import numpy as np
import pytest
import yaml

from llmsim.errors import ProfileError
from llmsim.perf.profile_table import MeasuredProfile, available_profiles, find_profile_file, load_profile_file
from llmsim.profiles.providers.skew import fit_skew, heldout, predict_t_skew, read_skew, rel_errors
from llmsim.profiles.replay import Recorded, simulate_run
from tests.profiles.helpers import DATA, RAW, needs_raw

PERF = RAW / "llmservingsim/profiler/perf"
# committed profile -> its skew table (Llama-3-8B and Mistral-7B on the 4090 are Llama-3.1-8B's shape twins)
TABLES = {
    ("rtx4090", "llama-3.1-8b.yaml"): "RTX4090/meta-llama/Llama-3.1-8B/bf16/tp1",
    ("rtx-pro-6000", "qwen3-32b.yaml"): "RTXPRO6000/Qwen/Qwen3-32B/bf16/tp1",
    ("rtx-pro-6000", "qwen3-32b-tp2.yaml"): "RTXPRO6000/Qwen/Qwen3-32B/bf16/tp2",
    ("rtx-pro-6000", "qwen3-30b-a3b.yaml"): "RTXPRO6000/Qwen/Qwen3-30B-A3B-Instruct-2507/bf16/tp1",
    ("rtx-pro-6000", "qwen3-30b-a3b-tp2.yaml"): "RTXPRO6000/Qwen/Qwen3-30B-A3B-Instruct-2507/bf16/tp2",
}
WITH_SKEW = {*TABLES, ("rtx4090", "llama-3-8b.yaml"), ("rtx4090", "mistral-7b.yaml")}


@needs_raw
@pytest.mark.parametrize("key", sorted(TABLES))
def test_the_committed_term_predicts_the_measured_skewed_batches(key):
    """The profile's coefficients against every skew.csv row: closer than the summed-context model in both regimes,
    and the mixed batches' error at least a fifth lower."""
    prof = load_profile_file(DATA / key[0] / key[1])
    df = read_skew(PERF / TABLES[key] / "skew.csv")
    fitted = rel_errors(df, predict_t_skew(df, prof.decode_skew.as_dict()))
    none = rel_errors(df, predict_t_skew(df, None))
    for regime in ("pure", "mixed"):
        sel = (df.regime == regime).to_numpy()
        assert fitted[sel].mean() < none[sel].mean()
    mixed = (df.regime == "mixed").to_numpy()
    assert fitted[mixed].mean() < 0.8 * none[mixed].mean()
    assert prof.parts["decode_skew"] == "measured"
    assert prof.describe()["parts"]["decode_skew"] == "measured"


@needs_raw
def test_held_out_kv_big_levels_and_tables_keep_the_gain():
    df = read_skew(PERF / TABLES[("rtx-pro-6000", "qwen3-32b-tp2.yaml")] / "skew.csv")
    ho = heldout(df).set_index("regime")
    assert (ho.fit_mean < ho.none_mean).all()
    assert ho.at["mixed", "fit_p90"] < ho.at["mixed", "none_p90"]
    coef = fit_skew(df)
    assert 0.0 < coef["pure"] < 0.1  # decode-only batches: alpha near zero, as the tables say
    other = read_skew(PERF / TABLES[("rtx4090", "llama-3.1-8b.yaml")] / "skew.csv")  # another GPU and model
    sel = (other.regime == "mixed").to_numpy()
    assert (rel_errors(other, predict_t_skew(other, coef))[sel].mean()
            < rel_errors(other, predict_t_skew(other, None))[sel].mean())


def test_only_profiles_with_a_skew_table_have_the_term():
    seen = set()
    for model, gpu, tp in available_profiles():
        f = find_profile_file(model, gpu, tp)
        if f is None or f.parent.parent != DATA:
            continue
        prof = load_profile_file(f)
        key = (gpu, f.name)
        seen.add(key)
        assert (prof.decode_skew is not None) == (key in WITH_SKEW), key
        if prof.decode_skew is None:
            assert "decode_skew" not in prof.data and "decode_skew" not in prof.parts
            assert prof.decode_step_fn(8, 500)(4000) == prof.step_time(8, 8, 0, 0, 8, 4000)  # no term at all
    assert seen >= WITH_SKEW


def _broken(tmp_path, edit) -> str:
    data = yaml.safe_load((DATA / "rtx4090" / "llama-3.1-8b.yaml").read_text())
    edit(data)
    f = tmp_path / "broken.yaml"
    f.write_text(yaml.safe_dump(data))
    with pytest.raises(ProfileError) as e:
        load_profile_file(f)
    msg = str(e.value)
    assert "\n" not in msg and str(f) in msg
    return msg


@pytest.mark.parametrize(("edit", "key"), [
    (lambda d: d["decode_skew"].update(mixed="fast"), "decode_skew.mixed"),
    (lambda d: d["decode_skew"].update(pure=float("nan")), "decode_skew.pure"),
    (lambda d: d["decode_skew"].pop("mixed_per_inv_n"), "decode_skew.mixed_per_inv_n"),
    (lambda d: d.update(decode_skew=[0.1, 0.2]), "decode_skew"),
    (lambda d: d["parts"].pop("decode_skew"), "parts.decode_skew"),
])
def test_a_broken_term_is_one_line_naming_the_file_and_key(tmp_path, edit, key):
    assert f"'{key}'" in _broken(tmp_path, edit)


def test_alpha_is_clamped_and_needs_a_spread():
    data = yaml.safe_load((DATA / "rtx4090" / "llama-3.1-8b.yaml").read_text())
    data["decode_skew"] = {"pure": -0.5, "mixed": 5.0, "mixed_per_inv_n": 0.0}
    skew = MeasuredProfile(data, "x").decode_skew
    assert skew.extra(4, 4 * 900, 1200, 800, False) == 0.0  # a negative alpha is clamped to 0
    assert skew.alpha(4, 4 * 900, 1200, 800, True) == 1.0  # ... one above 1 to 1
    assert skew.extra(4, 4 * 900, 900, 900, True) == 0.0  # equal contexts: nothing to correct


def test_replay_without_the_term_changes_only_profiles_that_have_it():
    rng = np.random.default_rng(0)
    n = 60
    rec = Recorded(np.cumsum(rng.exponential(0.3, n)), rng.integers(20, 1500, n), rng.integers(2, 400, n), None, None)
    args = ("chunked", 2048, 64, 0.9, None)
    on, notes, _ = simulate_run(rec, "qwen3-32b", "rtx-pro-6000", 2, *args)
    off, notes_off, _ = simulate_run(rec, "qwen3-32b", "rtx-pro-6000", 2, *args, decode_skew=False)
    assert on["mean_tpot_ms"] > off["mean_tpot_ms"]
    assert "decode_skew=measured" in " ".join(notes) and "decode_skew" not in " ".join(notes_off)
    plain = [simulate_run(rec, "llama-2-7b", "a100-80gb", 1, *args, decode_skew=s)[0] for s in (True, False)]
    assert plain[0] == plain[1]
