"""Rebuild a trained policy from a checkpoint: ``load_policy(path)`` -> an eval mode.

    from pipeline.policy import load_policy
    policy = load_policy('cartpole_dqn/1/ckpt/eval.pth.tar')
    action = policy(obs[None])[0]          # greedy action for one observation

The checkpoint must come from ``CkptSaver(..., config=cfg, policy_type=...)`` (the examples pass
both), which stores the policy config next to the weights. Loading is safe (``weights_only``) and works
across devices: the file is read onto the CPU and the weights are put on ``device`` (default ``'auto'``:
the GPU when there is one), whatever device the policy was trained on.
"""
from __future__ import annotations

import copy
from typing import Any, Mapping

from easydict import EasyDict

from pipeline.envs.gym_make import make_gym_env

from ..checkpoint import CheckpointError, read_checkpoint
from ..device import DeviceLike
from .dqn import DQNPolicy
from .ppo import PPOPolicy
from .sac import SACPolicy

__all__ = ['load_policy', 'build_policy_from_checkpoint', 'config_for_device']


def config_for_device(cfg: Mapping, device: DeviceLike) -> Any:
    """A copy (an ``EasyDict``) of a config saved in a checkpoint, to rebuild its policy on this machine: its
    ``policy.device`` is ``device`` (a ``str``; a ``torch.device`` is passed to the policy instead, and the
    config says ``'auto'``) and the key ``policy.cuda`` of checkpoints written before ``policy.device``
    existed is dropped. The device the checkpoint was trained on does not matter."""


    out = EasyDict(copy.deepcopy(dict(cfg)))
    section = out.get('policy')
    if isinstance(section, Mapping):
        section.pop('cuda', None)
        section['device'] = device if isinstance(device, str) else 'auto'
    return out


def build_policy_from_checkpoint(path: str, device: DeviceLike = 'auto') -> Any:
    """The policy object (``DQNPolicy`` / ``SACPolicy`` / ``PPOPolicy``) with the checkpoint's model weights,
    on ``device`` (``'auto'``, ``'cpu'``, ``'cuda'``, ``'cuda:N'`` or a ``torch.device``; the device it was
    trained on does not matter)."""
    state = read_checkpoint(path)
    extra = state.get('extra', {})
    cfg = extra.get('config')
    kind = extra.get('policy_type') or (isinstance(cfg, Mapping) and cfg.get('policy', {}).get('type'))
    if not isinstance(cfg, Mapping) or not kind:
        raise CheckpointError(f'{path!r} has no policy config (it was saved without CkptSaver(config=..., '
                              f'policy_type=...)); build the policy yourself and use load_checkpoint(path, policy)')
    cfg = config_for_device(cfg, device)
    dev = None if isinstance(device, str) else device
    sd = state['policy']
    try:
        if kind == 'dqn':
            policy = DQNPolicy(cfg, device=dev)
            policy.model.load_state_dict(sd['model'])
        elif kind == 'sac':
            policy = SACPolicy(cfg, *_sac_shapes(cfg, sd['actor']), device=dev)
            policy.actor.load_state_dict(sd['actor'])
            if 'critic' in sd:
                policy.critic.load_state_dict(sd['critic'])
        elif kind == 'ppo':
            policy = _ppo_from_config(cfg, dev)
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


def _ppo_from_config(cfg: Any, device: DeviceLike = None) -> Any:
    """A ``PPOPolicy`` for the saved config: its network is sized, and continuous actions bounded, by
    the spaces of the config's env (made once, then closed)."""


    env_cfg = cfg.get('env', {})
    env = make_gym_env(env_cfg.get('env_id', 'CartPole-v1'), **dict(env_cfg.get('env_kwargs') or {}))
    try:
        return PPOPolicy(cfg, env.observation_space, env.action_space, device=device)
    finally:
        env.close()


def load_policy(path: str, device: DeviceLike = 'auto') -> Any:
    """The greedy (eval-mode) policy saved in ``path``, on ``device``: ``policy(obs_batch) -> actions``."""
    return build_policy_from_checkpoint(path, device).eval_mode
