"""PPO on a gymnasium MuJoCo task: InvertedPendulum-v5 by default, until the return is the maximum (1000).

    python examples/ppo_mujoco.py                                  # InvertedPendulum-v5, stops at mean eval 1000
    python examples/ppo_mujoco.py --smoke                          # under a minute: does it run here?
    python examples/ppo_mujoco.py --env HalfCheetah-v5             # MuJoCo defaults, 1M env steps
    python examples/ppo_mujoco.py --play mujoco_ppo_InvertedPendulum-v5/1/ckpt/eval.pth.tar --render

Needs the ``mujoco`` extra (``pip install 'rlpipe[mujoco]'``). Same flags as every training example
(``--exp-name``, ``--seed``, ``--set key=value``, ``--resume``, ``--play``, ``--middleware``, ...); runs go
to ``./mujoco_ppo_<env>/<n>/``. The env gets the Gaussian policy's actions clipped to its bounds
(log-probs are of the unclipped samples); a time-limit truncation bootstraps from the final observation.

InvertedPendulum-v5 settings (``SETTINGS`` below): 8 envs x 64 steps = 512 rows per rollout, minibatch
128, 10 epochs, gamma 0.99, GAE lambda 0.95, lr 1e-3 decaying linearly over 100k env steps, clip range
0.2, entropy 0, max grad norm 0.5, [64, 64] tanh actor and critic, Gaussian log-std init 0, no
observation or reward normalisation; evaluation every 5 rollouts (2,560 env steps) over 10
deterministic episodes, stop at a mean of 1000 (every episode held for the full 1000 steps).
Env steps and time to the maximum return for seeds 0-5: docs/benchmarks.md.
``tests/ppo/test_ppo_mujoco.py`` runs seed 0 to 1000 (budget 60k env steps).

Other MuJoCo ids: RL-Zoo's MuJoCo PPO defaults (1 env x 2,048 steps, minibatch 64, 10 epochs, gamma
0.99, GAE lambda 0.95, lr 3e-4, clip 0.2, observations and rewards normalised, 1M env steps, no stop
value: the final policy is evaluated once more at the end).
"""
from __future__ import annotations

import copy
import sys
from typing import Any, Dict, List, Optional, Sequence

from pipeline.run.atari_mujoco import add_smoke_flag  # no torch

try:
    from examples.ppo_cartpole import main as _ppo_main
except ImportError:  # run as a script: examples/ is on sys.path
    from ppo_cartpole import main as _ppo_main  # type: ignore[import-not-found, no-redef]

#: InvertedPendulum-v5: learns to hold the pole for all 1000 steps in a short run.
SETTINGS: Dict[str, Dict[str, Any]] = {
    'InvertedPendulum-v5': {
        'env': {'collector_env_num': 8, 'evaluator_env_num': 5, 'n_evaluator_episode': 10, 'stop_value': 1000},
        'policy': {
            'discount_factor': 0.99,
            'gae_lambda': 0.95,
            'model': {'normalize_obs': False, 'log_std_init': 0.0},
            'learn': {'n_epochs': 10, 'batch_size': 128, 'learning_rate': 1e-3, 'lr_schedule': 'linear',
                      'clip_range': 0.2, 'clip_schedule': 'constant', 'ent_coef': 0.0,
                      'normalize_reward': False, 'total_env_steps': 100_000},
            'collect': {'n_steps': 64},
            'eval': {'evaluator': {'eval_freq': 5}},
        },
    },
}
MUJOCO_DEFAULTS: Dict[str, Any] = {
    'env': {'collector_env_num': 1, 'evaluator_env_num': 5, 'n_evaluator_episode': 5, 'stop_value': None},
    'policy': {
        'discount_factor': 0.99,
        'gae_lambda': 0.95,
        'model': {'normalize_obs': True, 'log_std_init': 0.0},
        'learn': {'n_epochs': 10, 'batch_size': 64, 'learning_rate': 3e-4, 'lr_schedule': 'constant',
                  'clip_range': 0.2, 'clip_schedule': 'constant', 'ent_coef': 0.0, 'normalize_reward': True,
                  'total_env_steps': 1_000_000},
        'collect': {'n_steps': 2048},
        'eval': {'evaluator': {'eval_freq': 10}},
    },
}


def user_config(env_id: str) -> dict:
    """The example's config for ``env_id`` (SETTINGS for the tuned ids, MUJOCO_DEFAULTS otherwise)."""
    cfg = copy.deepcopy(SETTINGS.get(env_id, MUJOCO_DEFAULTS))
    cfg['exp_name'] = f'mujoco_ppo_{env_id.split("/")[-1]}'
    cfg['env']['env_id'] = env_id
    return cfg


def make_env(env_id: str, render_mode: Optional[str] = None) -> Any:
    """One gymnasium MuJoCo env (a clear ImportError naming the extra when mujoco is missing)."""
    from pipeline.envs.env_manager import make_gym_env

    return make_gym_env(env_id, render_mode=render_mode) if render_mode else make_gym_env(env_id)


def main(argv: Optional[Sequence[str]] = None, extra_middleware: Optional[List[Any]] = None) -> int:
    """Train (or ``--play``) PPO on ``--env``; see :func:`examples.ppo_cartpole.main`."""
    def add_flags(p: Any) -> None:
        p.add_argument('--env', default='InvertedPendulum-v5', help='a gymnasium MuJoCo id (default InvertedPendulum-v5)')
        add_smoke_flag(p, {'max_env_step': 2_048, 'no_stop': True},
                       ['env.evaluator_env_num=2', 'env.n_evaluator_episode=2', 'policy.eval.evaluator.eval_freq=2'])

    def config_from_args(args: Any) -> dict:
        cfg = user_config(args.env)
        if args.exp_name == user_config('InvertedPendulum-v5')['exp_name']:  # the default: one folder per env
            args.exp_name = cfg['exp_name']
        return cfg

    return _ppo_main(argv, extra_middleware, user_config('InvertedPendulum-v5'), __doc__, make_env=make_env,
                     add_flags=add_flags, config_from_args=config_from_args, script=__file__)


if __name__ == '__main__':
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print('\ninterrupted before training started; nothing saved')
        sys.exit(130)
