"""Rebuild a trained policy from a checkpoint: ``load_policy(path)`` -> an eval mode.

    from pipeline.policy import load_policy
    policy = load_policy('cartpole_dqn/1/ckpt/eval.pth.tar')
    action = policy(obs[None])[0]          # greedy action for one observation

The checkpoint must come from ``CkptSaver(..., config=cfg, policy_type=...)`` (the examples pass
both), which stores the policy config next to the weights. Loading is safe (``weights_only``).
"""
from __future__ import annotations

from typing import Any, Mapping

__all__ = ['load_policy', 'build_policy_from_checkpoint']


def build_policy_from_checkpoint(path: str) -> Any:
    """The policy object (``DQNPolicy`` / ``SACPolicy`` / ``PPOPolicy``) with the checkpoint's model weights."""
    from middleware.ckpt_handler import CheckpointError, read_checkpoint

    state = read_checkpoint(path)
    extra = state.get('extra', {})
    cfg = extra.get('config')
    kind = extra.get('policy_type') or (isinstance(cfg, Mapping) and cfg.get('policy', {}).get('type'))
    if not isinstance(cfg, Mapping) or not kind:
        raise CheckpointError(f'{path!r} has no policy config (it was saved without CkptSaver(config=..., '
                              f'policy_type=...)); build the policy yourself and use load_checkpoint(path, policy)')
    from easydict import EasyDict

    cfg = EasyDict(cfg)
    sd = state['policy']
    try:
        if kind == 'dqn':
            from .dqn import DQNPolicy
            policy = DQNPolicy(cfg)
            policy.model.load_state_dict(sd['model'])
        elif kind == 'sac':
            from .sac import SACPolicy
            policy = SACPolicy(cfg, *_sac_shapes(cfg, sd['actor']))
            policy.actor.load_state_dict(sd['actor'])
            if 'critic' in sd:
                policy.critic.load_state_dict(sd['critic'])
        elif kind == 'ppo':
            policy = _ppo_from_config(cfg)
            policy.model.load_state_dict(sd['model'])
        else:
            raise CheckpointError(f'{path!r}: unknown policy type {kind!r} (known: dqn, sac, ppo)')
    except (KeyError, RuntimeError) as e:
        raise CheckpointError(f'{path!r}: the weights do not fit the saved config ({type(e).__name__}: '
                              f'{str(e).splitlines()[0][:300]})') from None
    policy.saved_config = cfg  # the full config the checkpoint was trained with (env id, ...)
    return policy


def _sac_shapes(cfg: Any, actor_sd: Mapping) -> tuple:
    """``(obs_shape, action_shape)`` for ``SACPolicy``: the config's, else read off the actor's weights
    (the examples size the networks from the env's spaces and leave them out of the config)."""
    model = cfg.get('policy', cfg).get('model', {}) or {}
    if model.get('obs_shape') is not None and model.get('action_shape') is not None:
        return None, None
    weights = [v for k, v in actor_sd.items() if k.startswith('body.') and k.endswith('weight')]
    if not weights or 'mu.weight' not in actor_sd:
        raise KeyError('actor weights (body.*.weight, mu.weight)')
    return int(weights[0].shape[1]), int(actor_sd['mu.weight'].shape[0])


def _ppo_from_config(cfg: Any) -> Any:
    """A ``PPOPolicy`` for the saved config: its network is sized, and continuous actions bounded, by
    the spaces of the config's env (made once, then closed)."""
    from pipeline.envs.env_manager import make_gym_env

    from .ppo import PPOPolicy

    env_cfg = cfg.get('env', {})
    env = make_gym_env(env_cfg.get('env_id', 'CartPole-v1'), **dict(env_cfg.get('env_kwargs') or {}))
    try:
        return PPOPolicy(cfg, env.observation_space, env.action_space)
    finally:
        env.close()


def load_policy(path: str) -> Any:
    """The greedy (eval-mode) policy saved in ``path``: ``policy(obs_batch) -> actions``."""
    return build_policy_from_checkpoint(path).eval_mode
