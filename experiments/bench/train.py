"""Training-speed benchmark: env steps/s of Double DQN training, gradient updates included.

    python -m experiments.bench train [--env workload_router] [--agent ddqn] [--steps 30000] [--num-envs 1] [--json]
    python -m experiments.bench train --num-envs 1,2,4 --steps 10000   # parallel experience collection: speed-ups
    python -m experiments.bench train --encoder [--heads 4] [--json]    # the graph encoder (agents/han.py) instead

Prints, for the env preset (conf/env/<name>.yaml): the env alone under a random mask-respecting policy
through the same vector env, DDQN training (updates from the first step: ``learning_starts`` = one batch),
and the cost of one gradient step and of one greedy action. Wall-clock figures on this machine; compare
before / after with farm-bench rather than across machines. "per CPU-s" divides by the process's CPU time
(with one env everything runs in-process): on a loaded machine it stays nearer the quiet figure than wall
time, and so do the ``*_cpu_*`` costs (median CPU time of the gradient step and the greedy action).
``agent_cpu_us_per_step``: the training's CPU time outside the env's own step, per env step (acting, storing,
sampling, gradient steps and the loop): the agent's share, which does not move with the env's speed.

``--encoder``: DenseHAN (the QoS-aware edge router's 2-layer HAN, hidden 64) on 256 synthetic graphs (N = 6
experts, caps 10, each queue filled uniformly at random), one thread: median forward + backward and forward ms,
batch-1 forward latency (torch and onnxruntime), against torch_geometric's HANConv on the same graphs (building
the PyG Batch, one forward of the Batch, and one single-graph forward). Medians of wall time and of the thread's CPU
time (plus the fastest forward + backward, a hint of the figure on a quiet machine).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from experiments.harness.timing import positive_int, print_json, timed
from llmsim.agents.base import LoopState
from llmsim.agents.buffer import ReplayBuffer
from llmsim.agents.ddqn import DDQNConfig, DoubleDQN
from llmsim.agents.han import DenseHAN, GraphLayout, export_onnx, load_pyg_weights, pyg_reference, random_observation
from llmsim.agents.loop import learn
from llmsim.agents.train import make_vec
from llmsim.envs.observations.graph import to_hetero_batch, to_hetero_data
from llmsim.resources import conf_dir


def _preset(group: str, name: str) -> dict[str, Any]:
    """A conf/<group>/<name>.yaml preset composed by Hydra (so ``defaults`` lists are honoured)."""
    with initialize_config_dir(str(conf_dir()), version_base="1.3"):
        cfg = compose("train", overrides=[f"{group}={name}"])
    return OmegaConf.to_container(cfg[group], resolve=True)


def _env_cfg(name: str) -> dict[str, Any]:
    cfg = _preset("env", name)
    if isinstance(cfg.get("reward"), dict) and "guidance" in cfg["reward"]:
        cfg["reward"]["guidance"] = 0.0
    return cfg


def bench(env: str = "workload_router", steps: int = 30_000, num_envs: int = 1, seed: int = 0,
          agent: str = "ddqn") -> dict[str, Any]:
    """The env alone, then DDQN training on it, then one gradient step and one greedy action, timed."""
    torch.set_num_threads(1)
    env_cfg = _env_cfg(env)
    vec = make_vec(env_cfg, num_envs)
    obs_dim, n = int(vec.observation_space.shape[0]), int(vec.action_space.n)
    rng = np.random.default_rng(seed)
    vec.seed(seed)
    vec.reset()
    masks = np.stack([ri["action_mask"] for ri in vec.reset_infos])
    t0, c0 = time.perf_counter(), time.process_time()
    done_steps = 0
    while done_steps < steps:
        acts = np.array([rng.choice(np.flatnonzero(m)) for m in masks])
        _, _, dones, infos = vec.step(acts)
        masks = np.stack([info["action_mask"] for info in infos])
        for i in np.flatnonzero(dones):
            masks[i] = vec.reset_infos[i]["action_mask"]
        done_steps += num_envs
    env_rate = done_steps / (time.perf_counter() - t0)
    env_cpu_rate = done_steps / max(1e-9, time.process_time() - c0)

    cfg = DDQNConfig(**_preset("agent", agent))
    cfg.learning_starts = cfg.batch_size
    ddqn = DoubleDQN(obs_dim, n, cfg, seed)
    rb = ReplayBuffer(cfg.buffer_size, num_envs, obs_dim, n, seed)
    env_cpu = _time_env_steps(vec)
    t0, c0 = time.perf_counter(), time.process_time()
    state = learn(ddqn, vec, rb, steps, LoopState(), seed=seed)
    train_wall, train_cpu = time.perf_counter() - t0, time.process_time() - c0
    vec.close()
    updates = ddqn.updates  # before the timing below adds its own

    batch = rb.sample(cfg.batch_size, cfg.gamma, cfg.tau)
    update_ms, update_cpu_ms, _ = timed(lambda: ddqn.update(batch), 50)
    obs = batch.obs[:1]
    mask = batch.next_masks[:1]
    act_ms, act_cpu_ms, _ = timed(lambda: ddqn.actor.act(obs, mask), 2000)
    return {"env": env, "num_envs": num_envs, "steps": state.step, "episodes": state.episode,
            "env_only_steps_per_s": round(env_rate, 1), "train_steps_per_s": round(state.step / train_wall, 1),
            "env_only_steps_per_cpu_s": round(env_cpu_rate, 1),
            "train_steps_per_cpu_s": round(state.step / max(1e-9, train_cpu), 1),
            "agent_cpu_us_per_step": round((train_cpu - env_cpu[0]) / max(1, state.step) * 1e6, 1),
            "updates": updates, "update_ms": round(update_ms, 3), "update_cpu_ms": round(update_cpu_ms, 3),
            "act_us": round(act_ms * 1e3, 1), "act_cpu_us": round(act_cpu_ms * 1e3, 1),
            "batch_size": cfg.batch_size, "train_freq": cfg.train_freq}


def _time_env_steps(vec: Any) -> list[float]:
    """Wrap ``vec.step_wait`` (the envs' own steps) to add its CPU seconds to the returned one-item list."""
    total = [0.0]
    step_wait = vec.step_wait

    def timed_step_wait() -> Any:
        c0 = time.process_time()
        out = step_wait()
        total[0] += time.process_time() - c0
        return out

    vec.step_wait = timed_step_wait
    return total


def _onnx_b1_us(model: Any, layout: Any, x1: np.ndarray) -> float | None:
    """onnxruntime batch-1 latency (one thread), None without onnxruntime."""
    try:
        import onnxruntime as ort  # optional: the onnx extra
    except ImportError:  # pragma: no cover
        return None
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "han.onnx")
        export_onnx(model, layout, path)
        so = ort.SessionOptions()
        so.intra_op_num_threads = so.inter_op_num_threads = 1
        sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        return timed(lambda: sess.run(None, {"obs": x1}), 500)[0] * 1e3


def bench_encoder(n_experts: int = 6, cap: int = 10, batch: int = 256, heads: int = 4, iters: int = 50,
                  seed: int = 0) -> dict[str, Any]:
    """DenseHAN vs PyG HANConv timings on ``batch`` synthetic graphs (see the module docstring)."""
    torch.set_num_threads(1)
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    layout = GraphLayout.for_experts(n_experts, cap, cap)
    obs = [random_observation(layout, rng) for _ in range(batch)]
    x = torch.from_numpy(np.concatenate([layout.flatten(o) for o in obs]))
    convs = pyg_reference(layout, 64, heads, 2)
    model = DenseHAN(layout, 64, heads, 2)
    load_pyg_weights(model, convs)

    def fwd_bwd() -> None:
        model.zero_grad(set_to_none=True)
        model(x).square().mean().backward()

    r: dict[str, Any] = {"encoder": "DenseHAN", "n_experts": n_experts, "cap": cap, "batch": batch, "heads": heads,
                         "threads": torch.get_num_threads()}
    r["fwd_bwd_ms"], r["fwd_bwd_cpu_ms"], r["fwd_bwd_min_ms"] = timed(fwd_bwd, iters)
    with torch.no_grad():
        r["fwd_ms"], r["fwd_cpu_ms"], _ = timed(lambda: model(x), iters)
        b1 = timed(lambda: model(x[:1]), 20 * iters)
        r["b1_fwd_us"], r["b1_fwd_cpu_us"] = b1[0] * 1e3, b1[1] * 1e3
        r["b1_onnxruntime_us"] = _onnx_b1_us(model, layout, x[:1].numpy())
        batched = {k: np.stack([o[k] for o in obs]) for k in layout.keys}
        r["pyg_batch_build_ms"] = timed(lambda: to_hetero_batch(batched), 3, 1)[0]
        pb = to_hetero_batch(batched)

        def pyg_fwd() -> None:
            h = pb.x_dict
            for conv in convs:
                h = conv(h, pb.edge_index_dict)

        r["pyg_batch_fwd_ms"] = timed(pyg_fwd, max(5, iters // 5), 2)[0]
        data = to_hetero_data(obs[0])

        def pyg_one() -> None:
            h = data.x_dict
            for conv in convs:
                h = conv(h, data.edge_index_dict)

        r["pyg_b1_fwd_us"] = timed(pyg_one, 20 * iters)[0] * 1e3
    return {k: (round(v, 3) if isinstance(v, float) else v) for k, v in r.items()}


def _print_encoder(r: dict[str, Any]) -> None:
    onnx = "n/a" if r["b1_onnxruntime_us"] is None else f"{r['b1_onnxruntime_us']:.1f}"
    print(f"DenseHAN, {r['batch']} graphs (N={r['n_experts']}, cap {r['cap']}, heads {r['heads']}), "
          f"{r['threads']} thread; median wall ms (thread CPU ms)\n"
          f"  forward + backward       : {r['fwd_bwd_ms']:>9.3f} ms ({r['fwd_bwd_cpu_ms']:.3f}); "
          f"fastest {r['fwd_bwd_min_ms']:.3f} ms\n"
          f"  forward                  : {r['fwd_ms']:>9.3f} ms ({r['fwd_cpu_ms']:.3f})\n"
          f"  batch-1 forward          : {r['b1_fwd_us']:>9.1f} us ({r['b1_fwd_cpu_us']:.1f}); "
          f"onnxruntime {onnx} us\n"
          f"PyG HANConv x 2, same graphs\n"
          f"  build the PyG Batch      : {r['pyg_batch_build_ms']:>9.3f} ms\n"
          f"  forward of the Batch     : {r['pyg_batch_fwd_ms']:>9.3f} ms (one multi-graph Batch)\n"
          f"  single-graph forward     : {r['pyg_b1_fwd_us']:>9.1f} us")


def _int_list(text: str) -> list[int]:
    """``--num-envs 1,2,4`` -> [1, 2, 4]."""
    try:
        out = [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected integers separated by commas, got {text!r}") from None
    if not out or min(out) < 1:
        raise argparse.ArgumentTypeError(f"expected integers >= 1, got {text!r}")
    return out


def _scaling(args: argparse.Namespace) -> int:
    """``--num-envs 1,2,4``: :func:`bench` per setting, then steps/s and speed-up over the first setting, with
    the 1-minute load average around each (other jobs on the machine take cores from the parallel envs)."""
    rows = []
    for n in args.num_envs:
        load0 = os.getloadavg()[0]
        t0 = time.perf_counter()
        r = bench(args.env, args.steps, n, args.seed, args.agent)
        r.update(wall_s=round(time.perf_counter() - t0, 1), load_before=round(load0, 2),
                 load_after=round(os.getloadavg()[0], 2), cpus=os.cpu_count())
        rows.append(r)
        if not args.json:
            print(f"num_envs={n}: {r['train_steps_per_s']:.1f} training steps/s ({r['wall_s']} s)", flush=True)
    base_env, base_train = rows[0]["env_only_steps_per_s"], rows[0]["train_steps_per_s"]
    for r in rows:
        r["env_only_speedup"] = round(r["env_only_steps_per_s"] / base_env, 2)
        r["train_speedup"] = round(r["train_steps_per_s"] / base_train, 2)
    if args.json:
        print_json(rows)
        return 0
    print(f"{args.env}, {args.agent}, {args.steps} steps per setting, {rows[0]['cpus']} CPUs\n"
          f"{'num_envs':>8} {'env alone steps/s':>18} {'speed-up':>8} {'training steps/s':>17} {'speed-up':>8} "
          f"{'load avg (1 min) before / after':>32}")
    for r in rows:
        print(f"{r['num_envs']:>8} {r['env_only_steps_per_s']:>18.1f} {r['env_only_speedup']:>8.2f} "
              f"{r['train_steps_per_s']:>17.1f} {r['train_speedup']:>8.2f} "
              f"{r['load_before']:>20.2f} / {r['load_after']:.2f}")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m experiments.bench train", description=__doc__.splitlines()[0])
    ap.add_argument("--env", default="workload_router", help="a conf/env preset (flat observation)")
    ap.add_argument("--steps", type=positive_int, default=30_000)
    ap.add_argument("--num-envs", type=_int_list, default=[1],
                    help="parallel envs (trainer.num_envs); a list such as 1,2,4 runs each in turn and ends with "
                         "a table of training steps/s and speed-up over the first, with the load average")
    ap.add_argument("--agent", default="ddqn", help="a conf/agent preset")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--encoder", action="store_true", help="benchmark the graph encoder (agents/han.py) instead")
    ap.add_argument("--heads", type=int, default=4, help="--encoder: attention heads")
    args = ap.parse_args(argv)
    for group in ("env", "agent"):
        known = sorted(f.stem for f in (conf_dir() / group).glob("*.yaml"))
        if getattr(args, group) not in known:
            ap.error(f"--{group}: no conf/{group} preset {getattr(args, group)!r}; expected one of {', '.join(known)}")
    if args.encoder:
        r = bench_encoder(heads=args.heads, seed=args.seed)
        if args.json:
            print_json(r)
        else:
            _print_encoder(r)
        return 0
    if len(args.num_envs) > 1:
        return _scaling(args)
    r = bench(args.env, args.steps, args.num_envs[0], args.seed, args.agent)
    if args.json:
        print_json(r)
    else:
        print(f"{r['env']} ({r['num_envs']} env(s), {r['steps']} steps, {r['episodes']} episodes)\n"
              f"  env alone, random policy : {r['env_only_steps_per_s']:>9.1f} steps/s "
              f"({r['env_only_steps_per_cpu_s']:.1f} per CPU-s)\n"
              f"  DDQN training            : {r['train_steps_per_s']:>9.1f} steps/s "
              f"({r['train_steps_per_cpu_s']:.1f} per CPU-s) "
              f"({r['updates']} updates, batch {r['batch_size']}, one per {r['train_freq']} steps)\n"
              f"  agent's share (CPU)      : {r['agent_cpu_us_per_step']:>9.1f} us per env step\n"
              f"  one gradient step        : {r['update_ms']:>9.3f} ms ({r['update_cpu_ms']:.3f} CPU)\n"
              f"  one greedy action        : {r['act_us']:>9.1f} us ({r['act_cpu_us']:.1f} CPU)")
    return 0

