"""``llmsim-train`` (also ``python -m llmsim.agents.train``): train a router with one Hydra command.

    llmsim-train agent=ddqn env=workload_router trainer.total_steps=200000
    llmsim-train +experiment=intelligent_router_guided
    llmsim-train agent=sac_han env=qos_edge
    llmsim-train trainer.resume=outputs/train/<date>/<time>/last trainer.total_steps=400000

The run directory (``hydra.run.dir``) gets ``tensorboard/`` and ``progress.csv`` (stable-baselines3's logger),
``best/`` (the checkpoint with the best in-training evaluation score, agents/scoring.py) and ``last/``.
stable-baselines3 supplies the vector envs (``trainer.num_envs`` > 1: one process per env) and the logger; the
algorithm is ``agent.name`` in the registry of agents/base.py (ddqn: agents/ddqn.py, sac: agents/sac.py,
sac_argmax: agents/sac_argmax.py), run by the experience loop of agents/loop.py. Training workloads are drawn
from the env's own seed stream (``seed``, seeds below 1000); the in-training evaluation, which picks ``best/``, uses
``trainer.eval_seeds`` (validation seeds 1000-1999), and llmsim-evaluate reports on test seeds from 2000.

The run says what a newcomer would otherwise find out late (agents/training_warnings.py), each a warning line at
the evaluation where it happens and an entry of training.json's ``warnings``: a budget below
``agent.learning_starts`` takes no gradient step, a ``best/`` saved before the first gradient step is the untrained
network, a greedy policy collapsed to one action, to waiting or to dropping, a fallback margin whose checkpoint
routes exactly as its guide heuristic; the final score is printed with what it is made of.
"""

from __future__ import annotations

import json
import math
import platform
import shutil
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
import yaml
from omegaconf import OmegaConf
from pydantic import Field
from stable_baselines3.common.vec_env import VecEnv
from tqdm import tqdm

from llmsim.agents import ddqn, guided, sac, sac_argmax, transfer  # noqa: F401 - the algorithms register themselves
from llmsim.agents.base import ALGORITHMS, LoopState, OffPolicyAgent, OffPolicyConfig
from llmsim.agents.buffer import ReplayBuffer
from llmsim.agents.checkpoint import QPolicy, load_policy_net, net_arch, save_checkpoint
from llmsim.agents.checkpoint_files import (
    REPLAY_FILE,
    TRAINER_FILE,
    first_misfit,
    load_replay,
    one_line,
    read_trainer_state,
    save_replay,
)
from llmsim.agents.checkpoint_meta import action_layout, check_compatible, observation_layout, read_meta
from llmsim.agents.ddqn import DDQNConfig
from llmsim.agents.env_setup import env_config, make_env, make_slot_env, ship_predictor
from llmsim.agents.loop import Experience
from llmsim.agents.nets import SPILL, GuidedQNetwork, SetQNetwork
from llmsim.agents.progress_log import TENSORBOARD, log_episode, make_logger
from llmsim.agents.sac_base import SACConfig
from llmsim.agents.scoring import check_metric, evaluate_greedy, summary_lines
from llmsim.agents.training_warnings import (
    WatchedGreedy,
    budget_warning,
    collapse_warnings,
    eval_seeds_warning,
    guide_only_warning,
    resume_drift_warning,
    untrained_best_warning,
)
from llmsim.agents.vec import make_vec
from llmsim.agents.zoo import checkpoint_dir
from llmsim.cli.hydra_app import run_hydra_app
from llmsim.envs.randomize import RandomizeConfig
from llmsim.envs.routing_env import RoutingEnv
from llmsim.errors import ConfigError, load_yaml_file
from llmsim.schema import NonNegInt, PosInt, Schema

PROG = "llmsim-train"


class TrainerConfig(Schema):
    """``trainer``: the budget, the in-training evaluation, checkpoints and resume (conf/train.yaml)."""

    where: ClassVar[str] = "trainer"
    total_steps: PosInt = 200_000  # env steps, summed over the parallel envs
    num_envs: PosInt = 1
    eval_every: NonNegInt = 20_000  # env steps between greedy evaluations (0: only at the end)
    eval_seeds: list[NonNegInt] = Field(default_factory=lambda: [1000, 1001], min_length=1)
    eval_metric: str = "return"
    resume: str | None = None
    stop_at_step: PosInt | None = None  # stop there with last/ (and its replay) to resume from
    init_from: str | None = None
    save_replay: bool = False
    progress: bool = True
    torch_threads: PosInt = 1


class TrainConfig(Schema):
    """A whole training run, as Hydra composes it from conf/train.yaml (``env`` is checked by the env itself,
    ``agent`` by its algorithm's config)."""

    where: ClassVar[str] = ""
    env: dict[str, Any]
    agent: dict[str, Any] = Field(default_factory=dict)
    seed: NonNegInt = 0
    predictor: str | dict[str, Any] | None = None
    trainer: TrainerConfig = Field(default_factory=TrainerConfig)
    label: str | None = None
    # policies that transfer (envs/randomize.py): training episodes on drawn scenarios, evaluation on these
    # validation scenarios (env options on top of ``env``; trainer.eval_seeds pick one each, seed % count)
    randomize: RandomizeConfig | None = None
    validation: list[dict[str, Any]] | None = None


def agent_config(agent: Mapping[str, Any]) -> OffPolicyConfig:
    """The ``agent`` group as its algorithm's config (``agent.name`` picks the algorithm; default ddqn)."""
    cls = ALGORITHMS.get(agent.get("name", "ddqn"), where="agent.name")
    return cls.config_type.parse(agent, "agent")


def check_setup(agent_cfg: OffPolicyConfig, env: RoutingEnv) -> None:
    """Refuse what would train something other than what was asked for, before any step."""
    if isinstance(agent_cfg, SACConfig):
        graph = hasattr(env.observation_space, "spaces")
        if (agent_cfg.encoder == "han") != graph:
            raise ConfigError(f"agent.encoder={agent_cfg.encoder} needs a {'graph' if not graph else 'flat'} "
                              f"observation; env observation {env.obs_builder.name!r} is "
                              f"{type(env.observation_space).__name__} (agent.encoder: "
                              f"{'han' if graph else 'mlp'})")
        return
    if not hasattr(env.observation_space, "shape") or len(env.observation_space.shape or ()) != 1:
        raise ConfigError(f"agent {agent_cfg.name!r} needs a flat (vector) observation; env observation "
                          f"{env.obs_builder.name!r} is {type(env.observation_space).__name__}")
    if isinstance(agent_cfg, DDQNConfig) and agent_cfg.guidance != "none":
        if "heuristic" not in env.reward_fn.components:
            raise ConfigError(f"agent.guidance={agent_cfg.guidance}: reward {env.reward_fn.name!r} has no heuristic "
                              f"term (use env.reward.kind=workload_aware or agent.guidance=none)")
        if env.reward_fn.weights.get("heuristic", 0.0) != 0.0:
            raise ConfigError(f"agent.guidance={agent_cfg.guidance} shapes with h itself; set env.reward.guidance=0 "
                              f"(now {env.reward_fn.weights['heuristic']}) so h is not counted twice")
        guided.stage(agent_cfg.guidance, 0, agent_cfg.gamma)


def build_agent(agent_cfg: OffPolicyConfig, env: RoutingEnv, seed: int) -> OffPolicyAgent:
    return ALGORITHMS.get(agent_cfg.name).for_env(env.observation_space, int(env.action_space.n), agent_cfg, seed)


def warn(message: str) -> None:
    print(f"{PROG}: warning: {message}", file=sys.stderr, flush=True)


class TrainingRun:
    """One run of :func:`train`: the agent, its replay and counters, the in-training evaluation and the
    checkpoints of a run directory."""

    def __init__(self, cfg: Mapping[str, Any], run_dir: Path) -> None:
        self.cfg, self.run_dir = TrainConfig.parse(cfg), run_dir
        self.tr = tr = self.cfg.trainer
        if tr.stop_at_step is not None and tr.stop_at_step > tr.total_steps:
            raise ConfigError(f"trainer.stop_at_step={tr.stop_at_step}: above trainer.total_steps={tr.total_steps}; "
                              "expected a step at most the budget (the run stops there, with last/ to resume from)")
        torch.set_num_threads(tr.torch_threads)
        self.agent_cfg = agent_config(self.cfg.agent)
        self.env_cfg = env_config(self.cfg.env, self.cfg.predictor, run_dir)
        self.transfer = self.cfg.randomize is not None
        # a randomised run of a guided agent (Double DQN) is validated by its gain over the guide; others (SAC) by
        # their own metric
        self.against_guide = self.transfer and "guide" in type(self.agent_cfg).model_fields
        self.eval_env = make_slot_env(self.env_cfg, scenarios=self.cfg.validation or [{}]) if self.transfer \
            else make_env(self.env_cfg)
        self.guide_rows: list[dict[str, Any]] | None = None  # the guide on the validation seeds (transfer)
        check_setup(self.agent_cfg, self.eval_env)
        if not self.against_guide:  # on an env of its own: the evaluation env is left as it was built
            check_metric(tr.eval_metric, make_slot_env(self.env_cfg, scenarios=self.cfg.validation or [{}])
                         if self.transfer else make_env(self.env_cfg))
        self.agent = build_agent(self.agent_cfg, self.eval_env, self.cfg.seed)
        n_actions = int(self.eval_env.action_space.n)
        self.rb = ReplayBuffer(self.agent_cfg.buffer_size, tr.num_envs, self.agent.replay_dim, n_actions,
                               self.cfg.seed, action_dim=n_actions if self.agent.stores_action_vectors else 0)
        self.state, self.history = LoopState(), []
        self.best_updates: int | None = None  # gradient steps behind best/ (0: the untrained network)
        self.warnings: list[dict[str, Any]] = []  # every warning of this run, with its step (training.json)
        self.config_yaml = OmegaConf.to_yaml(OmegaConf.create(dict(cfg)))
        self.loop: Experience | None = None  # the running experience loop (run), whose state a checkpoint keeps
        self.resumed: dict[str, Any] | None = None  # trainer.pt's ``resume`` part (agents/resume.py)
        self.restore()
        if tr.stop_at_step is not None and tr.resume and tr.stop_at_step <= self.state.step:
            raise ConfigError(f"trainer.stop_at_step={tr.stop_at_step}: trainer.resume={tr.resume} is already at step "
                              f"{self.state.step}; expected a later step (or no trainer.stop_at_step, to train to "
                              f"trainer.total_steps={tr.total_steps})")
        self.logger = make_logger(run_dir, (self.state.step, self.state.episode) if self.tr.resume else None)
        self.bar = tqdm(total=tr.total_steps, initial=min(self.state.step, tr.total_steps), unit="step",
                        disable=not tr.progress, dynamic_ncols=True, file=sys.stderr)
        self.policy = QPolicy(self.agent.policy_net(), "greedy")
        self.t0 = time.perf_counter()
        self.next_eval = (self.state.step // tr.eval_every + 1) * tr.eval_every if tr.eval_every else math.inf

    def restore(self) -> None:
        """``trainer.resume``: weights, optimiser, counters and (if saved) replay; ``trainer.init_from``: weights."""
        src = self.tr.resume or self.tr.init_from
        if not src:
            return
        key = "trainer.resume" if self.tr.resume else "trainer.init_from"
        try:  # a file, a folder without checkpoint.json or an unknown zoo name: said under the key that named it
            where, src = f"{key}={src}", str(checkpoint_dir(src))  # zoo:<name>: a shipped router's checkpoint
            meta = read_meta(src)
        except ConfigError as e:
            raise ConfigError(f"{key}: {e}") from None
        check_compatible(meta, self.eval_env, where)
        if key == "trainer.resume" and meta.get("agent") not in (None, self.agent_cfg.name):
            raise ConfigError(f"{where}: a {meta.get('agent')} checkpoint, but this run's agent is "
                              f"{self.agent_cfg.name} (resume with the agent it was trained with; trainer.init_from "
                              "starts from another run's weights)")
        net = self.agent.policy_net()
        have = net_arch(net)
        saved = {k: meta.get(k) for k in have}
        if saved.get("dueling") is None and "dueling" in have:
            saved["dueling"] = False
        if saved != have:
            raise ConfigError(f"{where}: network {saved}, but the agent has {have}")
        state = load_policy_net(src, meta).state_dict()
        misfit = first_misfit(state, net.state_dict())  # the same widths, another kind (guided, set network)
        if misfit:
            raise ConfigError(f"{where}: its network does not fit this {self.agent_cfg.name} agent's ({misfit}; "
                              f"its config.yaml has the agent it was trained with)")
        net.load_state_dict(state)
        self.agent.policy_loaded()
        if key == "trainer.init_from":
            return
        ts = read_trainer_state(Path(src), key)
        try:
            self.agent.load_state_dict(ts["agent"])
        except (KeyError, TypeError, ValueError, RuntimeError) as e:
            raise ConfigError(f"{Path(src) / TRAINER_FILE}: does not fit this {self.agent_cfg.name} agent: "
                              f"{one_line(e)}") from None
        self.state.restore(ts["loop"], str(Path(src) / TRAINER_FILE))
        saved = Path(src) / "config.yaml"
        drift = saved.is_file() and resume_drift_warning(where, load_yaml_file(saved) or {},
                                                         yaml.safe_load(self.config_yaml))
        if drift:
            self.warn_at(self.state.step, drift, evaluation=False)
        self.history.extend(ts.get("history", []))
        inexact = [] if load_replay(Path(src), self.rb) else [f"no {REPLAY_FILE} (trainer.save_replay=false): "
                                                              "the replay buffer refills"]
        self.carry_best(Path(src))
        self.resumed, self.resumed_file = ts.get("resume"), Path(src) / TRAINER_FILE
        if not isinstance(self.resumed, dict):
            inexact.insert(0, f"its {TRAINER_FILE} has no RNG states of the training envs and the replay (an older "
                              "llmsim saved it): training goes on from new episodes")
        if inexact:
            self.warn_at(self.state.step, f"{where}: {'; '.join(inexact)}: this run will not be bit-identical to one "
                         "that never stopped", evaluation=False)

    def carry_best(self, src: Path) -> None:
        """A resumed run keeps its best checkpoint so far: best/ beside the resumed one is copied into a new run
        directory, so best/ exists (and matches the restored best score) even when no later evaluation beats it."""
        best, dst = src.resolve().parent / "best", self.run_dir / "best"  # beside the target of a link
        if dst.exists():
            return
        if best.is_dir():
            shutil.copytree(best, dst, ignore=shutil.ignore_patterns("export"))  # an export goes stale with best/
            self.best_updates = read_meta(dst).get("updates")
            return
        if not self.history:  # stopped (trainer.stop_at_step) before its first evaluation: no best/ yet
            return
        self.state.best_score = -math.inf
        self.warn_at(self.state.step, f"trainer.resume={src}: no best/ beside it; best/ of this run is the best of "
                     "its own evaluations", evaluation=False)

    def meta(self) -> dict[str, Any]:
        """checkpoint.json's (and training.json's) description of the run so far."""
        a, st = self.agent_cfg, self.state
        label = self.cfg.label or (a.name if a.guidance == "none" else f"{a.name}_{a.guidance}")
        return {"agent": a.name, "label": label, "observation": observation_layout(self.eval_env),
                "actions": action_layout(self.eval_env), "env": self.env_cfg, "steps": st.step,
                "episodes": st.episode, "updates": self.agent.updates, "best_score": st.best_score,
                "eval_metric": self.tr.eval_metric, "evaluations": self.history, "seed": self.cfg.seed,
                "versions": {"python": platform.python_version(), "torch": torch.__version__,
                             "numpy": np.__version__},
                **({"load_gate": a.load_gate.model_dump()} if a.load_gate is not None else {})}

    def checkpoint(self, name: str, replay: bool = False) -> None:
        """Save ``name`` (best/ or last/); last/ with the replay when ``trainer.save_replay`` or ``replay``."""
        trainer_state = {"agent": self.agent.state_dict(), "loop": vars(self.state), "history": self.history}
        if self.loop is not None:
            trainer_state["resume"] = self.loop.snapshot()
        if name == "last":  # never a replay older than the trainer state beside it (a resume would load it as exact)
            (self.run_dir / name / REPLAY_FILE).unlink(missing_ok=True)
        meta = self.meta()  # the predictor's copy in the checkpoint, named relative to it: the folder travels alone
        meta["env"] = ship_predictor(meta["env"], self.run_dir / name)
        save_checkpoint(self.run_dir / name, self.agent.policy_net(), meta, self.config_yaml, trainer_state)
        if name == "last" and (self.tr.save_replay or replay):
            save_replay(self.run_dir / name, self.rb)

    def warn_at(self, step: int, message: str, evaluation: bool = True) -> str:
        """A warning line now (stderr; an evaluation's starts with its step) and in training.json's ``warnings``."""
        warn(f"step {step}: {message}" if evaluation else message)
        self.warnings.append({"step": step, "message": message})
        return message

    def evaluate(self) -> None:
        """Greedy evaluation on ``trainer.eval_seeds``; best/ on a new best score, last/ every time; a warning
        (and the evaluation's ``warnings``) when the policy collapsed or best/ is the untrained network."""
        st = self.state
        if self.against_guide:
            res, found = self.evaluate_transfer()
        else:
            watched = WatchedGreedy(self.policy)
            res = evaluate_greedy(watched, self.eval_env, list(self.tr.eval_seeds), self.tr.eval_metric)
            shares = watched.counts.shares()
            res.update(shares)
            found = collapse_warnings(shares)
        demo = int(getattr(self.agent_cfg, "demo_steps", 0) or 0)
        if st.step <= demo:  # one action is expected while the policy is still learning its guide's
            found = [f"{w}; it is still imitating its guide (agent.demo_steps={demo})" for w in found]
        res.update(step=st.step, episode=st.episode, updates=self.agent.updates,
                   wall_s=round(time.perf_counter() - self.t0, 2))
        new_best = res["score"] > st.best_score
        if new_best and self.agent.updates == 0:
            found.append(untrained_best_warning(st.step, self.agent_cfg.learning_starts))
        res["warnings"] = [self.warn_at(st.step, w) for w in found]
        self.history.append(res)
        for k, v in res.items():
            if k != "warnings":
                self.logger.record(f"eval/{k}", v)
        self.logger.dump(st.step)
        if new_best:
            st.best_score = res["score"]
            self.best_updates = self.agent.updates
            self.checkpoint("best")
        self.checkpoint("last")
        self.bar.set_postfix(ep=st.episode, eval=f"{res['score']:.4g}", best=f"{st.best_score:.4g}")

    def evaluate_transfer(self) -> tuple[dict[str, Any], list[str]]:
        """The greedy policy against its guide on the validation scenarios (agents/transfer.py): the score is the
        mean gain (%) in E2E with every request counted, lost requests first; and warnings when it collapsed."""
        seeds = list(self.tr.eval_seeds)
        if self.guide_rows is None:
            net = self.agent.policy_net()  # a split guide's spill rule is the network's own
            spill = net.spill if isinstance(net, SetQNetwork) else SPILL
            self.guide_rows = transfer.reference_rows(self.eval_env, seeds, self.agent_cfg.guide, spill)
        res, warnings = transfer.evaluate_vs_guide(self.agent.policy_net(), self.eval_env, seeds, self.guide_rows)
        res["score"] = res["gain_pct"] - 1e3 * res["lost"]
        return res, list(warnings)

    def attach_seen_range(self) -> None:
        """best/ with the seen range of the states in the replay (``agent.seen_slack``): outside them its guide
        decides (agents/seen_range.py). Training never acts with the range, so it learns as without it."""
        slack = getattr(self.agent_cfg, "seen_slack", None)
        if slack is None or not (self.run_dir / "best").is_dir() or self.rb.size == 0:
            return
        net = load_policy_net(self.run_dir / "best")
        net.fit_seen_range(torch.as_tensor(self.rb.obs[:self.rb.size].reshape(-1, self.rb.obs.shape[-1])), slack)
        meta = read_meta(self.run_dir / "best")
        meta["seen_slack"] = slack
        save_checkpoint(self.run_dir / "best", net, {k: v for k, v in meta.items() if k != "format"})

    def choose_margin(self) -> None:
        """The decision-time fallback margin of best/, chosen among ``agent.fallback_margins`` on the validation
        seeds; best/ is rewritten with it and training.json records every candidate."""
        margins = list(getattr(self.agent_cfg, "fallback_margins", []) or [])
        flat = getattr(self.agent_cfg, "guide_action", None) is not None
        if not ((self.transfer or flat) and margins and (self.run_dir / "best").is_dir()):
            return
        net = load_policy_net(self.run_dir / "best")
        seeds = list(self.tr.eval_seeds)
        if isinstance(net, GuidedQNetwork):
            best, table = transfer.choose_flat_margin(net, self.eval_env, seeds, margins, self.tr.eval_metric)
            note = None
        else:
            best, table = transfer.choose_margin(net, self.eval_env, seeds, margins, self.guide_rows or [],
                                                 getattr(self.agent_cfg, "fallback_worst_gap", None))
            note = guide_only_warning(next(r for r in table if r["margin"] == best), table)
        meta = read_meta(self.run_dir / "best")
        meta.update(fallback_margin=best, fallback_margin_choice=table)
        save_checkpoint(self.run_dir / "best", net, {k: v for k, v in meta.items() if k != "format"})
        self.margin_table = table
        if note:
            self.warn_at(self.state.step, note, evaluation=False)

    def on_episode(self, st: LoopState, info: dict[str, Any]) -> None:
        log_episode(self.logger, st, info)
        self.bar.set_postfix(ep=st.episode, ret=f"{st.returns[-1]:.4g}", best=f"{st.best_score:.4g}")

    def on_step(self, st: LoopState, stats: dict[str, float]) -> None:
        self.bar.update(min(st.step, self.tr.total_steps) - self.bar.n)
        if st.step >= self.next_eval:
            for k, v in stats.items():
                self.logger.record(f"train/{k}", v)
            self.logger.record("time/steps_per_s", st.step / max(1e-9, time.perf_counter() - self.t0))
            self.evaluate()
            self.next_eval += self.tr.eval_every

    def untrained_best_note(self) -> str:
        """Why best/ is the initial network: no gradient step before its evaluation, and none beat it since."""
        best = max(self.history, key=lambda r: r["score"])
        beaten_by_none = any(r.get("updates") for r in self.history)
        return (f"best/ is from step {best['step']}, before the first gradient step (agent.learning_starts="
                f"{self.agent_cfg.learning_starts}): it is the untrained initial network"
                f"{', which no later evaluation beat' if beaten_by_none else ''}; last/ has {self.agent.updates} "
                "gradient steps")

    def start_loop(self, vec: VecEnv) -> Experience:
        """The experience loop where the resumed checkpoint left it (agents/resume.py), or on new episodes (a new
        run; a resume that cannot continue its episodes, said in a warning)."""
        loop = Experience(self.agent, vec, self.rb, self.state)
        if self.resumed is not None:
            try:
                why = loop.restore(self.resumed)
            except (KeyError, TypeError, ValueError, AttributeError, RuntimeError) as e:
                raise ConfigError(f"{self.resumed_file}: resume: not the state of an experience loop this llmsim saves "
                                  f"({one_line(e)})") from None
            if why is None:
                return loop
            self.warn_at(self.state.step, f"trainer.resume={self.tr.resume}: {why}: training goes on from new "
                         "episodes, so this run will not be bit-identical to one that never stopped",
                         evaluation=False)
        loop.start(self.cfg.seed + 7919 * self.state.episode)
        return loop

    def run(self) -> dict[str, Any]:
        """Collect, learn, evaluate and checkpoint up to ``trainer.total_steps`` (or ``trainer.stop_at_step``: then
        last/ is where a resume goes on); returns the final meta, also written to training.json."""
        tr, st = self.tr, self.state
        for note in (budget_warning(tr.total_steps, self.agent_cfg) if self.agent.updates == 0 else None,
                     eval_seeds_warning(list(tr.eval_seeds)),
                     None if TENSORBOARD else "tensorboard is not installed: this run logs to progress.csv only "
                     "(pip install 'llmsim[rl]')"):
            if note:
                self.warn_at(st.step, note, evaluation=False)
        vec = make_vec(self.env_cfg, tr.num_envs, self.cfg.randomize)
        try:
            self.loop = self.start_loop(vec)
            self.loop.run(tr.total_steps, self.on_episode, self.on_step, tr.stop_at_step)
            stopped = st.step < tr.total_steps
            if stopped:  # the replay too, whatever trainer.save_replay: the resume is exact only with it
                self.checkpoint("last", replay=True)
            elif not self.history or self.history[-1]["step"] != st.step:
                self.evaluate()
            if not (self.run_dir / "last").is_dir():
                self.checkpoint("last")  # a resumed run that had nothing left to do
        finally:
            self.loop = None
            vec.close()
        self.bar.close()
        if stopped:
            meta = {**self.meta(), "stopped": {"step": st.step, "stop_at_step": tr.stop_at_step,
                                               "total_steps": tr.total_steps}}
        else:
            meta = self.final_meta()
        meta["wall_s"] = round(time.perf_counter() - self.t0, 2)
        meta["reward_kind"] = self.eval_env.reward_fn.name  # the env's own default when the config names none
        meta["warnings"] = self.warnings
        (self.run_dir / "training.json").write_text(json.dumps(meta, indent=1, default=str) + "\n")
        return meta

    def final_meta(self) -> dict[str, Any]:
        """The end of a run: best/ with its seen range and fallback margin, the meta with the margin's choice and
        whether best/ is the untrained network."""
        self.attach_seen_range()
        self.choose_margin()
        meta = self.meta()
        if getattr(self, "margin_table", None):
            meta["fallback_margin_choice"] = self.margin_table
        if self.best_updates == 0:
            meta["best_untrained"] = True
            self.warn_at(self.state.step, self.untrained_best_note(), evaluation=False)
        return meta


def train(cfg: Mapping[str, Any], run_dir: str | Path) -> dict[str, Any]:
    """Train per ``cfg`` (the composed conf/train.yaml as a plain dict); returns the final meta."""
    return TrainingRun(cfg, Path(run_dir)).run()


def main() -> None:
    def body(cfg: dict, run_dir: str) -> None:
        meta = train(cfg, run_dir)
        print("\n".join(summary_lines(meta, Path(run_dir))))

    run_hydra_app("train", PROG, body)


if __name__ == "__main__":
    main()
