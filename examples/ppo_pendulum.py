"""PPO on Pendulum-v1 (continuous actions): a fixed budget of 100k env steps, then a final evaluation.

    python examples/ppo_pendulum.py [--seed 1]             # prints its run folder ./pendulum_ppo/<n>/
    python examples/ppo_pendulum.py --play pendulum_ppo/1/ckpt/eval.pth.tar --render
    rlpipe run --package . --main examples.ppo_pendulum.main --parallel-workers 4   # learner, 2 collectors, evaluator

Hyperparameters (RL-Zoo's Pendulum-v1 PPO without gSDE, which rlpipe does not have): 4 envs x
1,024 steps per rollout, minibatch 64, 10 epochs, gamma 0.9, GAE lambda 0.95, lr 1e-3 and clip
range 0.2 (both constant), entropy 0, value coefficient 0.5, max grad norm 0.5, diagonal Gaussian
with state-independent log-std (init 0), [64, 64] tanh actor and critic, observations and rewards
normalised by running statistics (saved in the checkpoints). The env gets actions clipped to
[-2, 2]; log-probabilities are of the unclipped samples.

Final returns over seeds, next to Stable-Baselines3 with the same hyperparameters
(``python benchmarks/bench_ppo.py --pendulum``): docs/benchmarks.md.

Same flags as every training example (``--exp-name``, ``--seed``, ``--set key=value``, ``--resume``,
``--play``, ``--middleware``, ...): see ``examples/ppo_cartpole.py``.
"""
from __future__ import annotations

import sys
from typing import Any, List, Optional, Sequence

try:
    from examples.ppo_cartpole import main as _ppo_main
except ImportError:  # run as a script from another directory layout
    from ppo_cartpole import main as _ppo_main  # type: ignore[import-not-found, no-redef]

USER_CONFIG = {
    'exp_name': 'pendulum_ppo',
    'env': {'env_id': 'Pendulum-v1', 'collector_env_num': 4, 'evaluator_env_num': 5,
            'n_evaluator_episode': 10, 'stop_value': None},
    'policy': {
        'discount_factor': 0.9,
        'gae_lambda': 0.95,
        'model': {'normalize_obs': True, 'log_std_init': 0.0},
        'learn': {'n_epochs': 10, 'batch_size': 64, 'learning_rate': 1e-3, 'lr_schedule': 'constant',
                  'clip_range': 0.2, 'clip_schedule': 'constant', 'ent_coef': 0.0, 'normalize_reward': True,
                  'total_env_steps': 100_000},
        'collect': {'n_steps': 1024},
        'eval': {'evaluator': {'eval_freq': 5}},
    },
}


def main(argv: Optional[Sequence[str]] = None, extra_middleware: Optional[List[Any]] = None) -> int:
    """Train (or ``--play``) PPO on Pendulum-v1; see :func:`examples.ppo_cartpole.main`."""
    return _ppo_main(argv, extra_middleware, USER_CONFIG, __doc__, script=__file__)


if __name__ == '__main__':
    sys.exit(main())
