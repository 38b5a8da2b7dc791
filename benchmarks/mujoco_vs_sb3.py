"""MuJoCo side by side with Stable-Baselines3: SAC on HalfCheetah/Hopper (100k env steps) and PPO on Hopper (1M).

    python benchmarks/mujoco_vs_sb3.py --algo sac --env Hopper-v5 --seed 0                 # rlpipe, 100k env steps
    python benchmarks/mujoco_vs_sb3.py --algo sac --env Hopper-v5 --seed 0 --framework sb3 # the same with SB3
    python benchmarks/mujoco_vs_sb3.py --algo sac --env HalfCheetah-v5 --seed 1 --with-sb3 # rlpipe, then SB3
    python benchmarks/mujoco_vs_sb3.py --algo ppo --env Hopper-v5 --seed 0 --with-sb3 --parallel  # 1M each, side by side
    python benchmarks/mujoco_vs_sb3.py --algo sac --env Hopper-v5 --seed 0 --smoke --out /tmp/res  # a few seconds (CI)

Result: ``benchmarks/results/mujoco/<algo>_<env>_<framework>_seed<k>.json`` (``--out`` for another
directory) with the fields ``algo``, ``env``, ``seed``, ``framework`` ('rlpipe' or 'sb3'),
``final_return`` (mean of ``--eval-episodes`` (10) deterministic episodes of the final policy, the
same episode seeds for both frameworks), ``returns``, ``wall`` (seconds of training, evaluations
during training included, the final evaluation not), ``cpu_s``, the settings, a learning ``curve``
(mean return of 5 deterministic episodes every ``eval_every`` env steps), ``weights_sha256`` (the final
networks' weights), package versions and the machine (load average at start and end). ``python benchmarks/report.py`` renders the stored results
into docs/benchmarks.md. Each framework runs in a process of its own with one torch thread.

Settings (the same for both frameworks):
  sac: 256x256 actor and twin critics, Adam 3e-4, batch 256, discount 0.99, soft target update 0.005,
      learned temperature (initial 1.0), 1M replay, 5k uniform-random steps first, then one update per
      env step; 100k env steps; curve every 10k env steps. rlpipe: ``examples/sac_mujoco.py``; SB3:
      ``SAC('MlpPolicy', ...)``.
  ppo: RL-Zoo's tuned Hopper settings (rl-baselines3-zoo ``hyperparams/ppo.yml``, ``Hopper-v4``):
      1 env, rollouts of 512 steps, minibatch 32, 5 epochs, gamma 0.999, GAE lambda 0.99, lr 9.80828e-5,
      clip 0.2, entropy 0.00229519, value coefficient 0.835671, max grad norm 0.7, observations and
      rewards normalised (running statistics, clipped at 10), separate 256x256 ReLU policy and value
      nets, log-std init -2, no orthogonal init; 1M env steps; curve every 50k env steps. rlpipe:
      ``examples/ppo_mujoco.py`` with these settings; SB3: ``PPO`` on ``VecNormalize``.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable, Dict, List, Optional

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from benchmarks import run_facts  # noqa: E402  (after ROOT is on sys.path)

RESULTS_DIR = os.path.join(ROOT, 'benchmarks', 'results', 'mujoco')
FRAMEWORKS = ('rlpipe', 'sb3')

#: Per algorithm: the settings both frameworks use (``--smoke`` shrinks the step counts).
SETTINGS: Dict[str, Dict[str, Any]] = {
    'sac': {'steps': 100_000, 'random_steps': 5_000, 'eval_every': 10_000, 'hidden': [256, 256],
            'batch_size': 256, 'learning_rate': 3e-4, 'discount': 0.99, 'tau': 0.005, 'init_alpha': 1.0,
            'buffer_size': 1_000_000, 'updates_per_step': 1},
    'ppo': {'steps': 1_000_000, 'eval_every': 50_000, 'n_steps': 512, 'batch_size': 32, 'n_epochs': 5,
            'gamma': 0.999, 'gae_lambda': 0.99, 'learning_rate': 9.80828e-05, 'clip_range': 0.2,
            'ent_coef': 0.00229519, 'vf_coef': 0.835671, 'max_grad_norm': 0.7, 'hidden': [256, 256],
            'activation': 'relu', 'log_std_init': -2.0, 'ortho_init': False, 'normalize_obs': True,
            'normalize_reward': True},
}
SMOKE = {'sac': {'steps': 1_000, 'random_steps': 300, 'eval_every': 500},
         'ppo': {'steps': 2_048, 'eval_every': 1_024}}
CURVE_EPISODES = 5


def settings(algo: str, smoke: bool) -> Dict[str, Any]:
    """The settings of a run of ``algo`` (``SETTINGS``, shrunk for ``--smoke``)."""
    s = dict(SETTINGS[algo])
    if smoke:
        s.update(SMOKE[algo])
    return s


def eval_seed(seed: int, episode: int) -> int:
    """The reset seed of final-evaluation episode ``episode`` of run ``seed`` (the same for both frameworks)."""
    return 10_000 + 100 * seed + episode


def run_episodes(act: Callable[[Any], Any], make_env: Callable[[], Any], seeds: List[int]) -> List[float]:
    """Returns of one episode per reset seed, acting with ``act(obs) -> action``."""
    import numpy as np

    env = make_env()
    low, high = env.action_space.low, env.action_space.high
    returns = []
    for s in seeds:
        obs, _ = env.reset(seed=s)
        done, total = False, 0.0
        while not done:
            action = np.clip(np.asarray(act(obs), dtype=np.float32).reshape(low.shape), low, high)
            obs, r, terminated, truncated, _ = env.step(action)
            total += float(r)
            done = terminated or truncated
        returns.append(total)
    env.close()
    return returns


# ----------------------------------------------------------------------------------------------- rlpipe
def _rlpipe_env_maker(algo: str, env_id: str) -> Callable[[], Any]:
    """The env the rlpipe example trains on (SAC: actions rescaled to [-1, 1]; PPO: the plain env)."""
    if algo == 'sac':
        from pipeline.envs.mujoco import make_mujoco_env
        return lambda: make_mujoco_env(env_id)
    from examples.ppo_mujoco import make_env
    return lambda: make_env(env_id)


def _curve_probe(curve: List[List[float]]) -> Callable[[Any], None]:
    """Middleware: appends ``[env_step, mean return]`` each time the example's evaluator has run."""
    seen = {'iter': None}

    def probe(ctx: Any) -> None:
        if ctx.last_eval_iter >= 0 and ctx.last_eval_iter != seen['iter']:
            seen['iter'] = ctx.last_eval_iter
            curve.append([int(ctx.env_step), float(ctx.last_eval_value)])

    return probe


def train_rlpipe(algo: str, env_id: str, seed: int, s: Dict[str, Any], workdir: str,
                 device: Optional[str] = None) -> Dict[str, Any]:
    """Train with the rlpipe example (on ``device``: the example's ``--device``, default auto); returns
    ``{'act', 'wall', 'cpu', 'curve'}``."""
    import numpy as np
    import torch

    from pipeline.policy.loading import build_policy_from_checkpoint

    curve: List[List[float]] = []
    exp = os.path.join(workdir, f'{algo}_rlpipe')
    common = ['--env', env_id, '--seed', str(seed), '--threads', '1', '--max-env-step', str(s['steps']),
              '--exp-name', exp, '--no-progress', *(['--device', device] if device else [])]
    t0, c0 = time.perf_counter(), time.process_time()
    if algo == 'sac':
        from examples import sac_mujoco
        sets = {'env.evaluator_env_num': 1, 'env.n_evaluator_episode': CURVE_EPISODES,
                'policy.learn.learning_starts': s['random_steps'], 'policy.collect.random_collect_size': s['random_steps'],
                # the evaluator counts updates; they start after the random steps
                'policy.eval.evaluator.eval_freq': s['eval_every']}
        argv = common + ['--quiet'] + [x for k, v in sets.items() for x in ('--set', f'{k}={v}')]
        sac_mujoco.main(argv, extra_middleware=[_curve_probe(curve)])
    else:
        from examples import ppo_mujoco
        sets = {'env.collector_env_num': 1, 'env.evaluator_env_num': 1, 'env.n_evaluator_episode': CURVE_EPISODES,
                'policy.discount_factor': s['gamma'], 'policy.gae_lambda': s['gae_lambda'],
                'policy.model.hidden': json.dumps(s['hidden']), 'policy.model.activation': s['activation'],
                'policy.model.log_std_init': s['log_std_init'], 'policy.model.ortho_init': s['ortho_init'],
                'policy.model.normalize_obs': s['normalize_obs'],
                'policy.learn.n_epochs': s['n_epochs'], 'policy.learn.batch_size': s['batch_size'],
                'policy.learn.learning_rate': s['learning_rate'], 'policy.learn.lr_schedule': 'constant',
                'policy.learn.clip_range': s['clip_range'], 'policy.learn.clip_schedule': 'constant',
                'policy.learn.ent_coef': s['ent_coef'], 'policy.learn.vf_coef': s['vf_coef'],
                'policy.learn.max_grad_norm': s['max_grad_norm'], 'policy.learn.normalize_reward': s['normalize_reward'],
                'policy.learn.total_env_steps': s['steps'], 'policy.collect.n_steps': s['n_steps'],
                'policy.eval.evaluator.eval_freq': max(1, s['eval_every'] // s['n_steps'])}
        argv = common + [x for k, v in sets.items() for x in ('--set', f'{k}={v}')]
        rc = ppo_mujoco.main(argv, extra_middleware=[_curve_probe(curve)])
        if rc not in (0, None):
            raise SystemExit(f'the rlpipe PPO run ended with exit code {rc}')
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    ckpts = sorted(glob.glob(os.path.join(exp, '*', 'ckpt', 'final.pth.tar')), key=os.path.getmtime)
    if not ckpts:
        raise SystemExit(f'the rlpipe run wrote no final checkpoint under {exp}')
    trained = build_policy_from_checkpoint(ckpts[-1], device or 'auto')
    policy = trained.eval_mode  # greedy
    cfg_file = os.path.join(os.path.dirname(os.path.dirname(ckpts[-1])), 'config.json')
    config = None
    if os.path.exists(cfg_file):
        with open(cfg_file) as f:
            config = json.load(f)

    def act(obs: Any) -> Any:
        with torch.no_grad():
            return np.asarray(policy(np.asarray(obs, dtype=np.float32)[None]))[0]

    weights = [t for _, net in sorted(trained.networks().items()) for t in net.state_dict().values()]
    return {'act': act, 'make_env': _rlpipe_env_maker(algo, env_id), 'wall': wall, 'cpu': cpu, 'curve': curve,
            'config': config, 'weights': weights}


# ----------------------------------------------------------------------------------------------- SB3
def curve_eval_env(env_id: str, seed: int) -> Any:
    """The env of SB3's learning-curve evaluations (SAC; PPO evaluates on its ``VecNormalize`` env made with
    ``seed + 1``): seeded once with ``seed + 1``, so a rerun evaluates the same episodes (its later resets go on
    from that seed)."""
    import gymnasium as gym
    from stable_baselines3.common.monitor import Monitor

    env = Monitor(gym.make(env_id))
    env.reset(seed=seed + 1)
    return env


def train_sb3(algo: str, env_id: str, seed: int, s: Dict[str, Any], workdir: str,
              device: Optional[str] = None) -> Dict[str, Any]:
    """Train with Stable-Baselines3; returns ``{'act', 'wall', 'cpu', 'curve'}``."""
    import gymnasium as gym
    import numpy as np
    import torch
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.evaluation import evaluate_policy

    curve: List[List[float]] = []
    norm: Dict[str, Any] = {}

    class Curve(BaseCallback):
        def _on_step(self) -> bool:
            if self.num_timesteps % s['eval_every'] == 0:
                if norm:
                    from stable_baselines3.common.vec_env import sync_envs_normalization
                    sync_envs_normalization(self.training_env, norm['eval'])
                mean, _ = evaluate_policy(self.model, norm.get('eval') or eval_env, n_eval_episodes=CURVE_EPISODES,
                                          deterministic=True)
                curve.append([int(self.num_timesteps), float(np.mean(mean))])  # (a float: one mean return)
            return True

    from stable_baselines3.common.base_class import BaseAlgorithm

    t0, c0 = time.perf_counter(), time.process_time()
    eval_env = curve_eval_env(env_id, seed)
    model: BaseAlgorithm
    if algo == 'sac':
        from stable_baselines3 import SAC
        model = SAC('MlpPolicy', gym.make(env_id), learning_rate=s['learning_rate'], buffer_size=s['buffer_size'],
                    learning_starts=s['random_steps'], batch_size=s['batch_size'], tau=s['tau'], gamma=s['discount'],
                    train_freq=1, gradient_steps=s['updates_per_step'], ent_coef=f'auto_{s["init_alpha"]}',
                    policy_kwargs={'net_arch': list(s['hidden'])}, seed=seed, device=device or 'auto', verbose=0)
    else:
        from stable_baselines3 import PPO
        from stable_baselines3.common.env_util import make_vec_env
        from stable_baselines3.common.vec_env import VecNormalize
        venv = VecNormalize(make_vec_env(env_id, n_envs=1, seed=seed), gamma=s['gamma'], norm_obs=s['normalize_obs'],
                            norm_reward=s['normalize_reward'])
        norm['train'] = venv
        norm['eval'] = VecNormalize(make_vec_env(env_id, n_envs=1, seed=seed + 1), training=False,
                                    norm_reward=False, gamma=s['gamma'])
        act_fn = {'relu': torch.nn.ReLU, 'tanh': torch.nn.Tanh}[s['activation']]
        model = PPO('MlpPolicy', venv, n_steps=s['n_steps'], batch_size=s['batch_size'], n_epochs=s['n_epochs'],
                    gamma=s['gamma'], gae_lambda=s['gae_lambda'], learning_rate=s['learning_rate'],
                    clip_range=s['clip_range'], ent_coef=s['ent_coef'], vf_coef=s['vf_coef'],
                    max_grad_norm=s['max_grad_norm'], seed=seed, device=device or 'auto', verbose=0,
                    policy_kwargs={'log_std_init': s['log_std_init'], 'ortho_init': s['ortho_init'],
                                   'activation_fn': act_fn,
                                   'net_arch': {'pi': list(s['hidden']), 'vf': list(s['hidden'])}})
    model.learn(s['steps'], callback=Curve())
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0

    def act(obs: Any) -> Any:
        if norm:
            obs = norm['train'].normalize_obs(obs)
        action, _ = model.predict(obs, deterministic=True)
        return action

    return {'act': act, 'make_env': lambda: gym.make(env_id), 'wall': wall, 'cpu': cpu, 'curve': curve,
            'weights': list(model.policy.state_dict().values())}


# ----------------------------------------------------------------------------------------------- runner
def result_path(out: str, algo: str, env_id: str, framework: str, seed: int) -> str:
    return os.path.join(out, f'{algo}_{env_id}_{framework}_seed{seed}.json')


def run_one(args: argparse.Namespace) -> Dict[str, Any]:
    """Train and evaluate one framework in this process; writes and returns the result."""
    import numpy as np
    import torch

    torch.set_num_threads(1)
    # read before training: the commit of the code that runs
    versions = run_facts.versions(('torch', 'numpy', 'gymnasium', 'mujoco', 'stable_baselines3'))
    load_at_start = run_facts.load_average()
    s = settings(args.algo, args.smoke)
    episodes = 2 if args.smoke else args.eval_episodes
    with tempfile.TemporaryDirectory(prefix='rlpipe-mujoco-') as workdir:
        train = train_rlpipe if args.framework == 'rlpipe' else train_sb3
        r = train(args.algo, args.env, args.seed, s, workdir, getattr(args, 'device', None))
        t_eval = time.perf_counter()
        returns = run_episodes(r['act'], r['make_env'], [eval_seed(args.seed, e) for e in range(episodes)])
        eval_wall = time.perf_counter() - t_eval
    result = {
        'benchmark': 'mujoco', 'algo': args.algo, 'env': args.env, 'seed': args.seed, 'framework': args.framework,
        'smoke': bool(args.smoke), 'settings': s, 'env_steps': s['steps'],
        'final_return': float(np.mean(returns)), 'returns': returns, 'eval_episodes': episodes,
        'eval_wall_s': eval_wall, 'wall': r['wall'], 'cpu_s': r['cpu'],
        'weights_sha256': run_facts.weights_sha256(r['weights']),  # the final policy's networks
        'curve': {'x': 'env_steps', 'y': f'mean return of {CURVE_EPISODES} deterministic episodes',
                  'points': r['curve']},
        'rlpipe_config': portable(r.get('config'), workdir),  # the run's compiled config (rlpipe runs)
        'versions': versions,
        'machine': run_facts.machine(load_at_start),
        'finished_utc': time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime()),
    }
    os.makedirs(args.out, exist_ok=True)
    path = result_path(args.out, args.algo, args.env, args.framework, args.seed)
    with open(path, 'w') as f:
        json.dump(result, f, indent=1)
    print(f'{args.framework} {args.algo} {args.env} seed {args.seed}: final return {result["final_return"]:.1f} '
          f'over {episodes} episodes, {r["wall"]:.0f} s of training (CPU {r["cpu"]:.0f} s); wrote {path}', flush=True)
    return result


def portable(record: Any, workdir: str) -> Any:
    """``record`` with no absolute path of this machine: the repository's root is dropped from paths under it
    (``examples/sac_mujoco.py``) and the run's temporary folder ``workdir`` becomes ``<workdir>``."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
    if isinstance(record, str):
        return record.replace(workdir, '<workdir>').replace(root, '')
    if isinstance(record, dict):
        return {k: portable(v, workdir) for k, v in record.items()}
    if isinstance(record, list):
        return [portable(v, workdir) for v in record]
    return record


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument('--algo', choices=sorted(SETTINGS), default='sac')
    p.add_argument('--env', default='Hopper-v5', help='a gymnasium MuJoCo id (HalfCheetah-v5, Hopper-v5 in the table)')
    p.add_argument('--seed', type=int, default=0)
    p.add_argument('--framework', choices=FRAMEWORKS, default='rlpipe')
    p.add_argument('--with-sb3', action='store_true', help='run rlpipe, then SB3 (each in a process of its own)')
    p.add_argument('--parallel', action='store_true', help='with --with-sb3: the two side by side (one core each)')
    p.add_argument('--eval-episodes', type=int, default=10, help='final evaluation episodes')
    p.add_argument('--smoke', action='store_true', help='a few thousand steps (CI)')
    p.add_argument('--out', default=RESULTS_DIR, help='directory of the JSON results')
    from pipeline.run import add_device_flags  # no torch

    add_device_flags(p)  # both frameworks train there (default auto)
    return p


def main(argv: Optional[List[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    if args.eval_episodes < 1:
        raise SystemExit(f'--eval-episodes must be >= 1, got {args.eval_episodes}')
    if args.algo == 'sac' or args.framework == 'sb3' or args.with_sb3:
        import importlib.util
        for mod, extra in (('mujoco', "pip install 'rlpipe[mujoco]'"),) + (
                (('stable_baselines3', 'pip install stable-baselines3'),)
                if args.framework == 'sb3' or args.with_sb3 else ()):
            if importlib.util.find_spec(mod) is None:
                raise SystemExit(f'{mod} is not installed: {extra}')
    if not args.with_sb3:
        run_one(args)
        return 0
    base = [sys.executable, os.path.abspath(__file__), '--algo', args.algo, '--env', args.env, '--seed',
            str(args.seed), '--eval-episodes', str(args.eval_episodes), '--out', args.out] + (
        ['--smoke'] if args.smoke else []) + (['--device', args.device] if args.device else [])
    cmds = [base + ['--framework', fw] for fw in FRAMEWORKS]
    if args.parallel:
        procs = [subprocess.Popen(c) for c in cmds]
        codes = [p.wait() for p in procs]
    else:
        codes = [subprocess.run(c).returncode for c in cmds]
    return max(codes)


if __name__ == '__main__':
    sys.exit(main())
