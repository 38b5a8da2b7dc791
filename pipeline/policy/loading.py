"""Rebuild a trained policy from a checkpoint: ``load_policy(path)`` -> an eval mode.

    from pipeline.policy import load_policy
    policy = load_policy('cartpole_dqn/1/ckpt/eval.pth.tar')
    action = policy(obs[None])[0]          # greedy action for one observation

The checkpoint must come from ``CkptSaver(..., config=cfg, policy_type=...)`` (the examples pass
both), which stores the policy config next to the weights. Loading is safe (``weights_only``) and works
across devices: the file is read onto the CPU and the weights are put on ``device`` (default ``'auto'``:
the GPU when there is one), whatever device the policy was trained on.

A file from elsewhere is data: nothing it names is imported and its config is checked before anything is
built (:func:`saved_policy`). The saved config must pass the policy's schema (one error naming every bad
key); the networks it describes are counted on PyTorch's ``meta`` device, without memory, and refused
above ``max_params`` (:data:`MAX_LOADED_PARAMS`; raise it or pass ``None`` for a file you trust); the
observation and action spaces come from the file (``extra['spaces']``), and an env is made only for an
older file without them, and never from an id of the form ``module:Name`` (gymnasium would import
``module``) unless the caller names that env (``env_id=``).
"""
from __future__ import annotations

import copy
from typing import Any, Callable, Mapping, MutableMapping, Optional, Tuple

import torch
from easydict import EasyDict

from ..checkpoint import MAX_LOADED_PARAMS, CheckpointError, read_checkpoint
from ..config import check_user_config
from ..envs.gym_make import env_id_module, make_gym_env
from ..envs.saved_spaces import SavedSpacesError, spaces_from_plain
from ..device import DeviceLike
from .dqn import DQNPolicy
from .ppo import PPOPolicy
from .sac import SACPolicy
from .base import ActingMode, Policy

__all__ = ['load_policy', 'build_policy_from_checkpoint', 'config_for_device', 'saved_policy', 'SavedPolicy', 'policy_from_saved',
           'check_network_size', 'network_parameters', 'saved_or_env_spaces', 'env_id_refusal', 'MAX_LOADED_PARAMS']


def config_for_device(cfg: Mapping, device: DeviceLike) -> Any:
    """A copy (an ``EasyDict``) of a config saved in a checkpoint, to rebuild its policy on this machine: its
    ``policy.device`` is ``device`` (a ``str``; a ``torch.device`` is passed to the policy instead, and the
    config says ``'auto'``) and the key ``policy.cuda`` of checkpoints written before ``policy.device``
    existed is dropped. The device the checkpoint was trained on does not matter."""
    out = EasyDict(copy.deepcopy(dict(cfg)))
    section = out.get('policy')
    if isinstance(section, MutableMapping):
        section.pop('cuda', None)
        section['device'] = device if isinstance(device, str) else 'auto'
    return out


_KINDS = ('dqn', 'sac', 'ppo')


def env_id_refusal(where: str, env_id: object, how: str) -> Optional[str]:
    """A one-line refusal when a file's ``env_id`` would make gymnasium import a module (``module:Name``),
    else ``None``; ``how`` says how the user names the env themselves (an argument or a flag)."""
    module = env_id_module(env_id)
    if module is None:
        return None
    return (f'{where} names the env {env_id!r}, which would import the module {module!r} to make it; a loaded '
            f'file never imports what it names: if you trust it, {how}')


class SavedPolicy:
    """What a checkpoint says about its policy, checked: ``kind`` (``'dqn'``, ``'sac'``, ``'ppo'``), ``config``
    (the saved config, valid for ``kind``'s schema), ``spaces`` (``(observation_space, action_space)`` or
    ``None`` for files written before spaces were stored) and ``state`` (the whole file)."""

    def __init__(self, path: str, state: Mapping[str, object], kind: str, config: Mapping[str, Any],
                 spaces: Optional[Tuple[object, object]]) -> None:
        self.path, self.state, self.kind, self.config, self.spaces = path, state, kind, config, spaces

    @property
    def env_id(self) -> Any:
        env = self.config.get('env')
        return env.get('env_id') if isinstance(env, Mapping) else None


def saved_policy(path: str, state: Optional[Mapping[str, object]] = None) -> SavedPolicy:
    """Read (or take) a checkpoint and check what it says about its policy before anything is built:
    ``CheckpointError`` (one line) for a file without a policy config, an unknown policy type, a config the
    policy's schema refuses (every bad key named) or malformed spaces."""
    state = read_checkpoint(path) if state is None else state
    extra = state.get('extra', {})
    extra = extra if isinstance(extra, Mapping) else {}
    cfg = extra.get('config')
    kind = extra.get('policy_type')
    if kind is None and isinstance(cfg, Mapping) and isinstance(cfg.get('policy'), Mapping):
        kind = cfg['policy'].get('type')
    if not isinstance(cfg, Mapping) or not kind:
        raise CheckpointError(f'{path!r} has no policy config (it was saved without CkptSaver(config=..., '
                              f'policy_type=...)); build the policy yourself and use load_checkpoint(path, policy)')
    if kind not in _KINDS:
        raise CheckpointError(f'{path!r}: unknown policy type {kind!r} (known: {", ".join(_KINDS)})')
    problems = check_user_config(cfg, kind)
    if problems:
        raise CheckpointError(f'{path!r}: its saved config is invalid ({"; ".join(problems)}); the file was '
                              f'edited or damaged')
    spaces = extra.get('spaces')
    if spaces is not None:
        try:
            spaces = spaces_from_plain(spaces)
        except SavedSpacesError as e:
            raise CheckpointError(f'{path!r}: its saved {e}') from None
    return SavedPolicy(path, state, kind, cfg, spaces)


def network_parameters(build: Callable[[Any], Any], cfg: Mapping[str, object]) -> int:
    """The parameters of the networks ``build(cfg)`` makes (a policy with ``networks()``), counted by building
    it on PyTorch's ``meta`` device: no memory is allocated, whatever the config says."""
    with torch.device('meta'):
        probe = build(config_for_device(cfg, 'meta'))
    return sum(p.numel() for net in probe.networks().values() for p in net.parameters())


def check_network_size(path: str, build: Callable[[object], object], cfg: Mapping[str, object], max_params: Optional[int],
                       how: str = 'pass max_params=N') -> None:
    """``CheckpointError`` (one line) when the networks of ``build(cfg)`` would have more than ``max_params``
    parameters (``None``: no limit), or when the saved config builds no policy at all."""
    if max_params is None:
        return
    try:
        n = network_parameters(build, cfg)
    except (ValueError, TypeError, KeyError, RuntimeError, AttributeError) as e:
        raise CheckpointError(f'{path!r}: its saved config builds no policy ({type(e).__name__}: '
                              f'{str(e).splitlines()[0][:200] if str(e) else ""})') from None
    if n > max_params:
        raise CheckpointError(f'{path!r}: its saved config builds networks of {n:,} parameters, more than the '
                              f'limit of {max_params:,}; if you trust the file, {how}')


def saved_or_env_spaces(saved: SavedPolicy, env_id: Optional[str] = None,
                        how: str = 'pass env_id=... yourself') -> Tuple[object, object]:
    """The file's ``(observation_space, action_space)``; for an older file without them, those of the env
    ``env_id`` (the caller's) or the saved id, made once and closed. A saved ``module:Name`` id is refused
    (``CheckpointError``) unless the caller names the env."""
    if saved.spaces is not None:
        return saved.spaces
    if env_id is None:
        refusal = env_id_refusal(repr(saved.path), saved.env_id, how)
        if refusal is not None:
            raise CheckpointError(refusal)
    chosen = env_id if env_id is not None else saved.env_id
    if not isinstance(chosen, str):
        raise CheckpointError(f'{saved.path!r} holds neither the spaces of its env nor an env id to make it')
    env_cfg = saved.config.get('env', {})
    env = make_gym_env(chosen, **dict(env_cfg.get('env_kwargs') or {}))
    try:
        return env.observation_space, env.action_space
    finally:
        env.close()


def _builder(kind: str, spaces: Optional[Tuple[object, object]], actor_sd: Optional[Mapping] = None,
             device: DeviceLike = None) -> Callable[[Any], Any]:
    """``cfg -> policy`` for a policy of ``kind`` sized by the config (and ``spaces`` for PPO, the actor's
    weights for SAC when the config has no shapes)."""
    if kind == 'dqn':
        return lambda c: DQNPolicy(c, device=device)
    if kind == 'sac':
        return lambda c: SACPolicy(c, *_sac_shapes(c, actor_sd or {}), device=device)
    assert spaces is not None
    return lambda c: PPOPolicy(c, spaces[0], spaces[1], device=device)


def build_policy_from_checkpoint(path: str, device: DeviceLike = 'auto', env_id: Optional[str] = None,
                                 max_params: Optional[int] = MAX_LOADED_PARAMS) -> Any:
    """The policy object (``DQNPolicy`` / ``SACPolicy`` / ``PPOPolicy``) with the checkpoint's model weights,
    on ``device`` (``'auto'``, ``'cpu'``, ``'cuda'``, ``'cuda:N'`` or a ``torch.device``; the device it was
    trained on does not matter). ``env_id``: the env to size a PPO policy by when the file holds no spaces (a
    file's own ``module:Name`` id is never made); ``max_params``: the most parameters the saved config may
    build (``None``: no limit). The policy's ``saved_config`` is the config, ``saved_spaces`` the spaces."""
    return policy_from_saved(saved_policy(path), device, env_id, max_params)


def policy_from_saved(saved: SavedPolicy, device: DeviceLike = 'auto', env_id: Optional[str] = None,
                      max_params: Optional[int] = MAX_LOADED_PARAMS,
                      how_env: str = 'pass env_id=... yourself (load_policy(path, env_id=...))',
                      how_params: str = 'pass max_params=N (or None) yourself') -> Policy:
    """:func:`build_policy_from_checkpoint` for a file already read by :func:`saved_policy`; ``how_env`` and
    ``how_params`` end the refusals of a ``module:Name`` env id and of a network over ``max_params``."""
    path = saved.path
    sd = saved.state['policy']
    if not isinstance(sd, Mapping):
        raise CheckpointError(f'{path!r}: "policy" must hold the weights, got {type(sd).__name__}')
    spaces = saved_or_env_spaces(saved, env_id, how_env) if saved.kind == 'ppo' else saved.spaces
    cfg = config_for_device(saved.config, device)
    dev = None if isinstance(device, str) else device
    try:
        check_network_size(path, _builder(saved.kind, spaces, sd.get('actor')), cfg, max_params, how_params)
        policy = _builder(saved.kind, spaces, sd.get('actor'), dev)(cfg)
        for name, net in policy.networks().items():
            if name in sd or name != 'critic':  # a SAC file of the actor alone has no critic
                net.load_state_dict(sd[name])
    except (KeyError, RuntimeError) as e:
        raise CheckpointError(f'{path!r}: the weights do not fit the saved config ({type(e).__name__}: '
                              f'{str(e).splitlines()[0][:300]})') from None
    policy.saved_config = cfg  # the full config the checkpoint was trained with (env id, ...)
    policy.saved_spaces = spaces
    return policy


def _sac_shapes(cfg: Any, actor_sd: Mapping[str, Any]) -> Tuple[Optional[int], Optional[int]]:
    """``(obs_shape, action_shape)`` for ``SACPolicy``: the config's, else read off the actor's weights
    (the examples size the networks from the env's spaces and leave them out of the config)."""
    model = cfg.get('policy', cfg).get('model', {}) or {}
    if model.get('obs_shape') is not None and model.get('action_shape') is not None:
        return None, None
    weights = [v for k, v in actor_sd.items() if k.startswith('body.') and k.endswith('weight')]
    if not weights or 'mu.weight' not in actor_sd:
        raise KeyError('actor weights (body.*.weight, mu.weight)')
    return int(weights[0].shape[1]), int(actor_sd['mu.weight'].shape[0])


def load_policy(path: str, device: DeviceLike = 'auto', env_id: Optional[str] = None,
                max_params: Optional[int] = MAX_LOADED_PARAMS) -> ActingMode:
    """The greedy (eval-mode) policy saved in ``path``, on ``device``: ``policy(obs_batch) -> actions``
    (``env_id``, ``max_params``: as :func:`build_policy_from_checkpoint`)."""
    return build_policy_from_checkpoint(path, device, env_id, max_params).eval_mode
