"""Bad input gets clear errors naming the key / request and what was expected."""

import pytest

from llmsim import EngineConfig, InstanceConfig, simulate
from llmsim.cluster import Cluster
from llmsim.cluster.config import instances_from_config
from llmsim.errors import ConfigError
from llmsim.routing import make_router
from llmsim.testing import LinearProfile, requests


def test_zero_instances():
    with pytest.raises(ConfigError, match="at least one instance"):
        Cluster([], make_router("random"))
    with pytest.raises(ConfigError, match="count 0"):
        instances_from_config({"instances": [{"model": "llama-2-7b", "gpu": "a100-80gb", "count": 0}]})


def test_unknown_keys_are_named():
    with pytest.raises(ConfigError, match=r"cluster.instances\[0\].*unknown key.*'gpus'"):
        instances_from_config({"instances": [{"model": "llama-2-7b", "gpus": "a100-80gb"}]})
    with pytest.raises(ConfigError, match=r"engine.*unknown key.*'max_seqs'"):
        instances_from_config({"instances": [{"model": "llama-2-7b"}]}, {"max_seqs": 3})
    with pytest.raises(ConfigError, match="unknown routing policy 'fastest'"):
        make_router("fastest")
    with pytest.raises(ConfigError, match="engine.policy: unknown value 'edf-ish'"):
        simulate([InstanceConfig(profile=LinearProfile(), engine=EngineConfig(policy="edf-ish"))], [], "random")


def test_unknown_model_and_gpu():
    with pytest.raises(ValueError, match="unknown model 'llama-9-7b'"):
        simulate([InstanceConfig(model="llama-9-7b")], [], "random")
    with pytest.raises(ValueError, match="unknown GPU 'b300'"):
        simulate([InstanceConfig(gpu="b300")], [], "random")


def test_model_that_does_not_fit_gpu_memory():
    with pytest.raises(ConfigError, match=r"instances\[0\].*llama-2-70b.*does not fit"):
        simulate([InstanceConfig(model="llama-2-70b", gpu="a100-80gb", profile_kind="roofline")], [], "random")


def test_prompt_longer_than_max_model_len_is_an_error_by_default():
    inst = InstanceConfig(profile=LinearProfile(), engine=EngineConfig(max_model_len=100))
    with pytest.raises(ConfigError, match=r"request 1 \(prompt 150 tokens\) can never be served.*max_model_len"):
        simulate([inst], requests([(0, 10, 5), (1, 150, 5)]), "random")


def test_unservable_requests_are_counted_when_dropping():
    inst = InstanceConfig(profile=LinearProfile(), engine=EngineConfig(max_model_len=100))
    res = simulate([inst], requests([(0, 10, 5), (1, 150, 5)]), "random", on_unservable="drop")
    assert res.summary["completed"] == 1 and res.summary["dropped"] == 1
    assert res.summary["dropped_by_reason"] == {"prompt_exceeds_max_model_len": 1}


def test_prompt_larger_than_kv_cache():
    inst = InstanceConfig(profile=LinearProfile(), engine=EngineConfig(num_gpu_blocks=4, block_size=16))
    with pytest.raises(ConfigError, match="prompt_exceeds_kv_capacity"):
        simulate([inst], requests([(0, 200, 5)]), "random")


def test_impossible_engine_settings():
    for bad, match in [({"max_num_seqs": 0}, "max_num_seqs"), ({"block_size": 0}, "block_size"),
                       ({"preemption": "kill"}, "preemption"),
                       ({"max_num_batched_tokens": 512, "max_model_len": 4096}, "smaller than max_model_len"),
                       ({"gpu_memory_utilization": 1.5}, "gpu_memory_utilization")]:
        with pytest.raises(ConfigError, match=match):
            simulate([InstanceConfig(model="llama-2-7b", gpu="a100-80gb", profile_kind="roofline",
                                     engine=EngineConfig(**bad))], [], "random")


def test_unsorted_workload():
    inst = InstanceConfig(profile=LinearProfile())
    with pytest.raises(ConfigError, match="not sorted by arrival: request 1"):
        simulate([inst], requests([(5, 10, 5), (1, 10, 5)]), "random")


def test_router_wait_and_drop_are_reported():
    from llmsim.routing import DROP, WAIT, Router

    class Picky(Router):
        name = "picky"

        def route(self, req, view):
            if req.id == 0:
                return DROP
            if req.id == 1 and view.now < 0.5:
                return WAIT  # retried when request 2 finishes
            return 0

    inst = InstanceConfig(profile=LinearProfile())
    res = simulate([inst], requests([(0, 10, 3), (0.1, 10, 3), (0.2, 10, 60)]), Picky())
    assert res.summary["dropped_by_reason"] == {"router": 1}
    r1 = res.requests.set_index("id").loc[1]
    assert r1.routed_time > 0.5  # decided again at a completion after 0.5 s


def test_config_files_that_are_not_utf8_or_unreadable_are_one_line(tmp_path) -> None:
    from llmsim.errors import ConfigError, load_json_file, load_yaml_file

    bad = tmp_path / "latin1.yaml"
    bad.write_bytes("name: caf\xe9\n".encode("latin-1"))
    for load in (load_yaml_file, load_json_file):
        with pytest.raises(ConfigError, match="latin1.yaml: not UTF-8") as e:
            load(bad)
        assert "\n" not in str(e.value)
    with pytest.raises(ConfigError, match="cannot read it"):
        load_yaml_file(tmp_path / "missing.yaml")


@pytest.mark.parametrize("text,line,key", [
    ("a: 1\nb: 2\na: 3\n", 3, "a"),
    ("top:\n  - {x: 1, y: 2, x: 1}\n", 2, "x"),
    ("m:\n  n:\n    k: 1\n    k: 2\n", 4, "k"),
    ("yes: 1\ntrue: 2\n", 2, "true"),  # the same key (True) in two spellings
])
def test_a_yaml_key_given_twice_in_one_mapping_is_one_line_naming_file_line_and_key(tmp_path, text, line, key):
    """PyYAML keeps the later of two equal keys without a word: every YAML file llmsim reads refuses them."""
    from llmsim.errors import ProfileError, load_yaml_file

    f = tmp_path / "dup.yaml"
    f.write_text(text)
    with pytest.raises(ProfileError) as e:
        load_yaml_file(f, ProfileError)
    assert str(e.value) == f"{f}: line {line}: key {key!r} given twice in one mapping; give each key once"


def test_yaml_merge_keys_and_keys_of_other_types_are_not_duplicates(tmp_path):
    from llmsim.errors import load_yaml_file

    f = tmp_path / "ok.yaml"
    f.write_text("base: &b {x: 1, y: 2}\nuse: {<<: *b, x: 3}\nkeys: {1: a, '1': b}\n")
    assert load_yaml_file(f) == {"base": {"x": 1, "y": 2}, "use": {"x": 3, "y": 2}, "keys": {1: "a", "1": "b"}}


def test_every_yaml_reader_refuses_a_key_given_twice(tmp_path, monkeypatch):
    """Profiles, cluster presets and a checkpoint's config.yaml go through the shared loader."""
    from llmsim.errors import ConfigError, ProfileError
    from llmsim.perf.profile_table import load_profile_file
    from llmsim.simulation import telemetry

    f = tmp_path / "p.yaml"
    f.write_text("memory: {}\nmemory: {}\n")
    with pytest.raises(ProfileError, match=r"p.yaml: line 2: key 'memory' given twice"):
        load_profile_file(f)
    (tmp_path / "cluster").mkdir()
    (tmp_path / "cluster" / "c.yaml").write_text("instances: []\ninstances: []\n")
    monkeypatch.setattr(telemetry, "conf_dir", lambda: tmp_path)
    with pytest.raises(ConfigError, match=r"c.yaml: line 2: key 'instances' given twice"):
        telemetry.cluster_preset("c")


@pytest.mark.parametrize("text, key", [
    ('{"testbed": "a", "testbed": "b"}', "testbed"),
    ('{"m": [{"k": 1, "x": 2, "k": 3}]}', "k"),
])
def test_a_json_key_given_twice_in_one_object_is_one_line_naming_file_and_key(tmp_path, text, key):
    """json keeps the later of two equal keys without a word: checkpoint.json, exports' meta and the zoo's
    manifests are read through the shared loader, which refuses them."""
    from llmsim.errors import load_json_file

    f = tmp_path / "dup.json"
    f.write_text(text)
    with pytest.raises(ConfigError) as e:
        load_json_file(f)
    assert str(e.value) == f"{f}: key {key!r} given twice in one object; give each key once"
    f.write_text('{"a": {"k": 1}, "b": {"k": 2}}')  # the same key in two objects is fine
    assert load_json_file(f) == {"a": {"k": 1}, "b": {"k": 2}}


def test_a_zoo_manifest_with_a_key_given_twice_is_refused(tmp_path, monkeypatch):
    from llmsim.agents import zoo

    d = tmp_path / "dup"
    d.mkdir()
    (d / "manifest.json").write_text('{"testbed": "qos_edge", "testbed": "best_effort"}')
    monkeypatch.setattr(zoo, "zoo_dir", lambda name: d)
    with pytest.raises(ConfigError, match="manifest.json: key 'testbed' given twice"):
        zoo.entry("zoo:dup")


def test_every_committed_json_file_has_unique_keys():
    from pathlib import Path

    from llmsim.errors import load_json_file

    root = Path(__file__).resolve().parents[1]
    files = [p for p in root.rglob("*.json") if not {".venv", "outputs", "node_modules"} & set(p.parts)]
    assert len(files) > 10
    for f in files:
        load_json_file(f)


@pytest.mark.parametrize("text,line", [
    ('{\n\n\n\n"a": "abc', "not valid JSON (Unterminated string starting at line 5)"),
    ('{\n"a": "x\ty"}', "not valid JSON (Invalid control character at line 2)"),
    ('{"a": }', "not valid JSON (Expecting value at line 1)"),
])
def test_a_json_syntax_error_is_one_line_naming_the_line_once(tmp_path, text, line):
    """json's messages ending in "at" ("starting at", "character at") are followed by the position, not by a
    second "at"."""
    from llmsim.errors import ConfigError, load_json_file

    f = tmp_path / "bad.json"
    f.write_text(text)
    with pytest.raises(ConfigError) as e:
        load_json_file(f)
    assert str(e.value) == f"{f}: {line}"
