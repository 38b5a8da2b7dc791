"""Resident memory over a run: does it stay flat in the number of updates?

Two parts (each run is its own child process, so each RSS is one run's alone):

* ``--learners dqn,sac,ppo,her,rnd`` (default): each example runs for a fixed budget with an RSS probe
  and a replay buffer small enough to be full over the last 60 % of the run, so whatever grows there
  grows with the updates (no early stop: the stop value is out of reach). Printed per learner: RSS at the
  start and end of that span, the difference, and the least-squares growth per 1,000 updates (the number
  that must stay near zero; PPO counts a rollout's epochs as one update). The cost of a filling buffer is what ``--vs-sb3``
  measures (and ``tests/data/test_buffer_memory.py`` checks the C heap over push + update steps).
* ``--vs-sb3 --steps 100000``: SAC on a MuJoCo env (``--env``, Hopper-v5 by default; the ``mujoco``
  extra) in rlpipe and in Stable-Baselines3 (``pip install stable-baselines3``) with the same settings:
  256x256 nets, batch 256, 1M replay, ``--learning-starts`` random steps first, one update per env step,
  Adam 3e-4, soft target 0.005, learned temperature; one torch thread; both evaluate 5 episodes on one env
  every 20k steps. Printed: peak RSS of each, their ratio, RSS samples, wall time, and the final
  deterministic policy's mean return over 10 episodes.
* ``--distributed``: DQN CartPole as 4 processes over the ZeroMQ bus (``rlpipe run``); the learner
  node's RSS per 1,000 updates once its (10k) replay buffer is full.

    python benchmarks/bench_memory.py                                   # all learners, ~12 min
    python benchmarks/bench_memory.py --learners sac --steps 12000
    python benchmarks/bench_memory.py --vs-sb3 --steps 100000 [--parallel] [--seed 0]
    python benchmarks/bench_memory.py --distributed --steps 40000      # the learner node of 4 processes

RSS is what the kernel reports (``psutil``), so the figures do not depend on machine load; wall times do.
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import resource
import subprocess
import sys
import time
from typing import Any, Dict, List, Optional

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from pipeline.run import add_device_flags, device_argv  # noqa: E402 - no torch

#: ``--device X`` when given: passed on to every child process and to the examples they run
DEVICE_ARGV: List[str] = []

# name -> (example module, argv, env steps by default, replay buffer size (None: on-policy))
LEARNERS: Dict[str, tuple] = {
    "dqn": ("dqn_cartpole", ["--set", "env.stop_value=1000000"], 40_000, 8_000),
    "sac": ("sac_mujoco", ["--env", "Hopper-v5", "--set", "policy.collect.random_collect_size=1000",
                           "--set", "policy.learn.learning_starts=1000"], 12_000, 3_000),
    "ppo": ("ppo_cartpole", ["--set", "env.stop_value=1000000"], 100_000, None),
    "her": ("her_bitflip", ["--stop-success", "1.1"], 30_000, 300),
    "rnd": ("dqn_rnd", [], 30_000, 5_000),
}


def _rss() -> int:
    import psutil

    return psutil.Process().memory_info().rss


def _peak_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


# ----------------------------------------------------------------------------- children
def child_learner(name: str, steps: int, workdir: str) -> None:
    module, argv, _, buffer_size = LEARNERS[name]
    mod = importlib.import_module(f'examples.{module}')
    every = max(steps // 40, 100)
    state = {"next": every}

    def rss_probe(ctx: Any) -> None:
        if ctx.env_step >= state["next"]:
            state["next"] = ctx.env_step + every
            print("SAMPLE " + json.dumps({"env_step": int(ctx.env_step), "train_iter": int(ctx.train_iter),
                                          "rss": _rss()}), flush=True)

    args = [*argv, "--max-env-step", str(steps), "--exp-name", os.path.join(workdir, name), "--no-progress",
            "--threads", "1", *DEVICE_ARGV]
    if buffer_size:  # small enough to be full before the measured span: what grows there grows per update
        args += ["--set", f"policy.other.replay_buffer.replay_buffer_size={buffer_size}"]
    mod.main(args, extra_middleware=[rss_probe])
    print("PEAK " + str(_peak_rss()), flush=True)


def child_sac_rlpipe(env_id: str, steps: int, starts: int, seed: int, workdir: str) -> None:
    from examples import sac_mujoco

    every = max(steps // 50, 500)
    state = {"next": every, "t0": time.perf_counter()}

    def rss_probe(ctx: Any) -> None:
        if ctx.env_step >= state["next"]:
            state["next"] = ctx.env_step + every
            print("SAMPLE " + json.dumps({"env_step": int(ctx.env_step), "rss": _rss()}), flush=True)

    res = sac_mujoco.main(["--env", env_id, "--max-env-step", str(steps), "--seed", str(seed), "--threads", "1",
                           "--exp-name", os.path.join(workdir, "sac"), "--no-progress", "--quiet",
                           "--set", "env.evaluator_env_num=1",  # 5 episodes on one env, as SB3's EvalCallback
                           "--set", f"policy.learn.learning_starts={starts}",
                           "--set", f"policy.collect.random_collect_size={starts}", *DEVICE_ARGV],
                          extra_middleware=[rss_probe])
    wall = time.perf_counter() - state["t0"]
    ckpt = res.get("final_ckpt") or os.path.join(res.get("run_dir", ""), "ckpt", "final.pth.tar")
    ret = _eval_rlpipe(env_id, ckpt, seed)
    print("RESULT " + json.dumps({"peak": _peak_rss(), "wall": wall, "eval_return": ret}), flush=True)


def _eval_rlpipe(env_id: str, ckpt: str, seed: int, episodes: int = 10) -> Optional[float]:
    import gymnasium as gym
    import numpy as np

    from pipeline.policy.loading import load_policy

    if not os.path.exists(ckpt):
        return None
    act = load_policy(ckpt)
    from pipeline.envs.mujoco import make_mujoco_env

    env = make_mujoco_env(env_id)
    rets = []
    for ep in range(episodes):
        obs, _ = env.reset(seed=10_000 + seed * 100 + ep)
        done, total = False, 0.0
        while not done:
            a = np.asarray(act(np.asarray(obs, dtype=np.float32)[None]))[0]
            obs, r, term, trunc, _ = env.step(a)
            total += float(r)
            done = term or trunc
        rets.append(total)
    env.close()
    del gym
    return float(sum(rets) / len(rets))


def child_sac_sb3(env_id: str, steps: int, starts: int, seed: int) -> None:
    import gymnasium as gym
    import torch
    from stable_baselines3 import SAC
    from stable_baselines3.common.callbacks import BaseCallback

    torch.set_num_threads(1)
    every = max(steps // 50, 500)

    class Probe(BaseCallback):
        def _on_step(self) -> bool:
            if self.num_timesteps % every == 0:
                print("SAMPLE " + json.dumps({"env_step": int(self.num_timesteps), "rss": _rss()}), flush=True)
            return True

    from stable_baselines3.common.callbacks import CallbackList, EvalCallback

    t0 = time.perf_counter()
    env = gym.make(env_id)
    evaluate = EvalCallback(gym.make(env_id), n_eval_episodes=5, eval_freq=20_000, deterministic=True, verbose=0)
    model = SAC("MlpPolicy", env, learning_rate=3e-4, buffer_size=1_000_000, learning_starts=starts, batch_size=256,
                tau=0.005, gamma=0.99, train_freq=1, gradient_steps=1, ent_coef="auto",
                policy_kwargs={"net_arch": [256, 256]}, seed=seed,
                device=DEVICE_ARGV[1] if DEVICE_ARGV else "cpu", verbose=0)
    model.learn(steps, callback=CallbackList([Probe(), evaluate]))
    wall = time.perf_counter() - t0
    rets = []
    eval_env = gym.make(env_id)
    for ep in range(10):
        obs, _ = eval_env.reset(seed=10_000 + seed * 100 + ep)
        done, total = False, 0.0
        while not done:
            a, _ = model.predict(obs, deterministic=True)
            obs, r, term, trunc, _ = eval_env.step(a)
            total += float(r)
            done = term or trunc
        rets.append(total)
    print("RESULT " + json.dumps({"peak": _peak_rss(), "wall": wall, "eval_return": sum(rets) / len(rets)}), flush=True)


def learner_rss_probe(cfg: Any) -> Any:
    """``--middleware benchmarks.bench_memory:learner_rss_probe``: the learner node prints its RSS every
    500 updates (``SAMPLE {...}`` lines, read by :func:`run_distributed`)."""
    from pipeline.runtime.roles import Role, for_roles

    state = {"next": 0}

    @for_roles(Role.LEARNER)
    def learner_rss(ctx: Any) -> None:
        if ctx.train_iter >= state["next"]:
            state["next"] = ctx.train_iter + 500
            print("SAMPLE " + json.dumps({"env_step": int(ctx.env_step), "train_iter": int(ctx.train_iter),
                                          "rss": _rss()}), flush=True)

    return learner_rss


# ----------------------------------------------------------------------------- parent
def _spawn(args: List[str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, os.path.abspath(__file__), *args, *DEVICE_ARGV], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=ROOT)


def _collect(proc: subprocess.Popen, what: str) -> Dict[str, Any]:
    out, err = proc.communicate()
    samples: List[Any] = []
    res: Dict[str, Any] = {}
    for line in out.splitlines():
        if line.startswith("SAMPLE "):
            samples.append(json.loads(line[7:]))
        elif line.startswith("PEAK "):
            res["peak"] = int(line[5:])
        elif line.startswith("RESULT "):
            res.update(json.loads(line[7:]))
    if proc.returncode != 0 or not samples:
        tail = "\n".join(err.strip().splitlines()[-15:])
        raise SystemExit(f"{what}: the child run failed (exit {proc.returncode}):\n{tail}")
    res["samples"] = samples
    return res


def _slope(samples: List[Dict[str, Any]], x: str) -> tuple:
    """Least-squares RSS growth per unit of ``x`` over the last 60 % of the samples, and that span."""
    pts = samples[int(len(samples) * 0.4):]
    xs = [float(p[x]) for p in pts]
    ys = [float(p["rss"]) for p in pts]
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    var = sum((a - mx) ** 2 for a in xs)
    slope = sum((a - mx) * (b - my) for a, b in zip(xs, ys)) / var if var else 0.0
    return slope, pts[0], pts[-1]


def _machine() -> str:
    import torch

    return (f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
            f"torch {torch.__version__}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")


def run_learners(names: List[str], steps: Optional[int], workdir: str) -> None:
    print(f"# resident memory per learner, replay buffers full over the measured span ({_machine()})")
    print(f"{'learner':<7} {'env steps':>9} {'updates':>8} {'buffer':>7} {'RSS first':>10} {'RSS last':>9} "
          f"{'growth':>7} {'KB per 1k updates':>18}")
    for name in names:
        _, _, default_steps, buffer_size = LEARNERS[name]
        n = steps or default_steps
        r = _collect(_spawn(["--child", name, "--steps", str(n), "--workdir", workdir]), name)
        slope, first, last = _slope(r["samples"], "train_iter")
        print(f"{name:<7} {last['env_step']:>9} {last['train_iter']:>8} {buffer_size or '-':>7} "
              f"{first['rss'] / 2**20:>8.0f}MB {last['rss'] / 2**20:>7.0f}MB "
              f"{(last['rss'] - first['rss']) / 2**20:>5.1f}MB {slope * 1000 / 1024:>18.1f}", flush=True)


def run_distributed(steps: int, workdir: str) -> None:
    """DQN CartPole as 4 processes (learner, 2 collectors, evaluator) over the ZeroMQ bus; a 10k replay
    buffer fills early, so any growth over the last 60 % of the learner's samples is per update."""
    print(f"# distributed DQN learner node, {steps} env steps, replay buffer 10k ({_machine()})")
    cmd = [sys.executable, "-m", "pipeline.run.cli", "run", "--package", ".", "--main", "examples.dqn_cartpole.main",
           "--parallel-workers", "4", "--", "--max-env-step", str(steps), "--set", "env.stop_value=1000000",
           "--set", "policy.other.replay_buffer.replay_buffer_size=10000", "--no-progress",
           "--exp-name", os.path.join(workdir, "dist"), "--middleware", "benchmarks.bench_memory:learner_rss_probe",
           *DEVICE_ARGV]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=3600)
    samples = []
    for line in proc.stdout.splitlines() + proc.stderr.splitlines():
        k = line.find("SAMPLE {")
        if k >= 0:
            samples.append(json.loads(line[k + 7:]))
    if len(samples) < 5:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
        raise SystemExit(f"distributed run: too few samples from the learner (exit {proc.returncode}):\n{tail}")
    samples.sort(key=lambda p: p["train_iter"])
    slope, first, last = _slope(samples, "train_iter")
    print(f"learner node: {last['train_iter']} updates, RSS {first['rss'] / 2**20:.0f} MB at {first['train_iter']} "
          f"updates, {last['rss'] / 2**20:.0f} MB at {last['train_iter']}: {slope * 1000 / 1024:.1f} KB per 1k updates")


def run_vs_sb3(env_id: str, steps: int, starts: int, seed: int, parallel: bool, workdir: str) -> None:
    print(f"# SAC {env_id}, {steps} env steps ({starts} random first), 1 update per step after that; "
          f"seed {seed} ({_machine()})")
    common = ["--env", env_id, "--steps", str(steps), "--learning-starts", str(starts), "--seed", str(seed),
              "--workdir", workdir]
    if parallel:
        a, b = _spawn(["--child", "sac-rlpipe", *common]), _spawn(["--child", "sac-sb3", *common])
        ours, sb3 = _collect(a, "rlpipe SAC"), _collect(b, "SB3 SAC")
    else:
        ours = _collect(_spawn(["--child", "sac-rlpipe", *common]), "rlpipe SAC")
        sb3 = _collect(_spawn(["--child", "sac-sb3", *common]), "SB3 SAC")
    for label, r in (("rlpipe", ours), ("SB3", sb3)):
        marks = [p for p in r["samples"] if p["env_step"] % max(steps // 5, 1) == 0] or r["samples"][-1:]
        curve = ", ".join(f"{p['env_step'] // 1000}k {p['rss'] / 2**20:.0f}" for p in marks)
        ret = r.get("eval_return")
        print(f"{label:<7} peak RSS {r['peak'] / 2**20:7.0f} MB   wall {r['wall']:7.0f} s   final return (10 ep, "
              f"deterministic) {'-' if ret is None else f'{ret:.0f}'}   RSS MB at: {curve}")
    print(f"peak RSS rlpipe / SB3: {ours['peak'] / sb3['peak']:.2f}x   wall rlpipe / SB3: "
          f"{ours['wall'] / sb3['wall']:.2f}x{' (run side by side)' if parallel else ''}")


def main(argv: Optional[List[str]] = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--learners", default="dqn,sac,ppo,her,rnd", help="comma-separated: " + ",".join(LEARNERS))
    p.add_argument("--steps", type=int, default=None, help="env steps per run (default: per learner; 100k with --vs-sb3)")
    p.add_argument("--vs-sb3", action="store_true", help="SAC peak RSS side by side with Stable-Baselines3")
    p.add_argument("--distributed", action="store_true", help="the learner node of a 4-process DQN run")
    p.add_argument("--env", default="Hopper-v5")
    p.add_argument("--learning-starts", type=int, default=5000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--parallel", action="store_true", help="--vs-sb3: run the two at once (one core each)")
    p.add_argument("--workdir", default=os.path.join("/tmp", "rlpipe_bench_memory"))
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    add_device_flags(p)
    a = p.parse_args(argv)
    DEVICE_ARGV[:] = device_argv(a)
    if a.child == "sac-rlpipe":
        return child_sac_rlpipe(a.env, a.steps, a.learning_starts, a.seed, a.workdir)
    if a.child == "sac-sb3":
        return child_sac_sb3(a.env, a.steps, a.learning_starts, a.seed)
    if a.child:
        return child_learner(a.child, a.steps, a.workdir)
    if a.distributed:
        return run_distributed(a.steps or 40_000, a.workdir)
    if a.vs_sb3:
        return run_vs_sb3(a.env, a.steps or 100_000, a.learning_starts, a.seed, a.parallel, a.workdir)
    names = [n.strip() for n in a.learners.split(",") if n.strip()]
    bad = [n for n in names if n not in LEARNERS]
    if bad:
        p.error(f"unknown learner {bad[0]!r}; choose from {', '.join(LEARNERS)}")
    run_learners(names, a.steps, a.workdir)


if __name__ == "__main__":
    main()
