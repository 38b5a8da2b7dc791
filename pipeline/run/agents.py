"""Train, save, load and run a policy from Python: DQN, PPO and SAC agents on a gymnasium env id::

    from pipeline.run import agents

    agent = agents.DQN('CartPole-v1', seed=0)
    agent.train(max_env_step=50_000, stop_value=475)     # stops early once an evaluation reaches 475
    agent.save('cartpole.pth.tar')
    agent = agents.DQN.load('cartpole.pth.tar')          # also a checkpoint the example scripts wrote
    action = agent.predict(obs, deterministic=True)      # one observation -> one action; a batch -> a batch

The env is a gymnasium id, an env made by ``gymnasium.make`` (or a vectorised one: its ``spec`` is used), or a
callable returning an env. Stable-Baselines3's forms work where they mean the same thing:
``agents.DQN('MlpPolicy', env)`` and ``agent.learn(total_timesteps=...)`` (docs/from_sb3.md);
``agents.DQN.describe_config()`` lists every config key with its default and what is allowed.

Each agent trains with the same settings and the same middleware as its example script
(:mod:`pipeline.run.recipes`: ``examples/dqn_cartpole.py``, ``ppo_cartpole.py``, ``sac_mujoco.py``); ``config``
overrides entries of those settings (checked like ``--set``). Checkpoints are the examples' format: an agent
loads ``<exp>/<n>/ckpt/eval.pth.tar`` and the examples' ``--play`` runs an agent's file. Bad input (an unknown
env id or config key, an observation of the wrong shape, another algorithm's checkpoint) raises
:class:`AgentError`, a ``ValueError`` with a one-line message.
"""
from __future__ import annotations

import copy
import numbers
import os
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Dict, List, Mapping, Optional, Tuple, Union

import gymnasium as gym
import numpy as np
from easydict import EasyDict

from contexts import OnlineRLContext
from middleware import online_logger, termination_checker

from ..checkpoint import COUNTER_KEYS, MAX_LOADED_PARAMS, CheckpointError, load_checkpoint, save_checkpoint, to_plain
from ..config import ConfigError, compile_config, config_table, format_config_table
from ..device import DeviceError, DeviceLike
from ..envs import EnvManager
from ..envs.errors import UnknownEnvError
from ..envs.gym_make import GymEnvFn, make_gym_env
from ..envs.mujoco import MujocoEnvFn, RescaledEnvFn
from ..runtime import task
from .agent_env import (EnvRefusal, env_source, maker_name, sb3_keyword_refusal, sb3_policy_name,
                        sb3_policy_refusal, time_limit)
from .play import play_policy
from .precheck import config_problems, format_problems
from .recipes import DQN_CARTPOLE, PPO_CARTPOLE, dqn_buffer, sac_policy_settings, use_dqn, use_ppo, use_sac
from .script import run_pipeline

if TYPE_CHECKING:  # they load torch, which importing the agents does not
    from ..data import DequeBuffer
    from ..policy import DQNPolicy
    from ..policy.ppo import PPOPolicy
    from ..policy.sac import SACPolicy

__all__ = ['Agent', 'AgentError', 'DQN', 'PPO', 'SAC']


class AgentError(ValueError):
    """Bad input to an agent; the message is one line saying what is wrong."""


def _merge(base: Dict[str, Any], over: Mapping[str, object]) -> Dict[str, object]:
    for k, v in over.items():
        if isinstance(v, Mapping) and isinstance(base.get(k), dict):
            _merge(base[k], v)
        else:
            base[k] = copy.deepcopy(v)
    return base


class Agent:
    """An algorithm's policy on one gymnasium env, with ``train``, ``predict``, ``evaluate``, ``save`` and
    ``load``. Use the subclasses :class:`DQN`, :class:`PPO` and :class:`SAC`."""

    algo: ClassVar[str] = ''
    default_env: ClassVar[str] = 'CartPole-v1'
    #: the config keys that size the network (what Stable-Baselines3's ``policy_kwargs=dict(net_arch=...)`` sets)
    net_keys: ClassVar[str] = ''
    _maker: Optional[Callable[[], gym.Env]] = None  # the user's env callable (None: the envs are made from the id)
    _verbose: int = 0
    _log_dir: Optional[str] = None

    def __init__(self, policy_or_env: object = None, env: object = None, seed: int = 0,
                 config: Optional[Mapping[str, object]] = None, device: DeviceLike = None, verbose: int = 0,
                 tensorboard_log: Optional[str] = None, **kwargs: object) -> None:
        """The env (``policy_or_env``, or ``env``): a registered gymnasium id (default :attr:`default_env`), an env
        made by ``gymnasium.make`` or a vectorised env (gymnasium's or Stable-Baselines3's: the agent makes its
        envs from the ``spec``: id, ``make`` arguments, time limit), or a callable returning an env (called for
        each env the agent makes). Stable-Baselines3's order ``DQN('MlpPolicy', env)`` works: ``'MlpPolicy'`` is
        the default network (an MLP); other SB3 policy names are refused with what to do.

        ``config``: overrides of the example's settings, e.g. ``{'policy': {'learn': {'learning_rate': 1e-3}}}``
        (every key: :meth:`describe_config`); ``device``: where the policy trains and acts (``'auto'``,
        ``'cpu'``, ``'cuda'``, ``'cuda:N'`` or a ``torch.device``; default the config's ``policy.device``,
        ``'auto'``: the GPU when there is one). ``verbose`` (1: ``train``/``learn`` show a progress line) and
        ``tensorboard_log`` (their default ``log_dir``) mean what they mean in Stable-Baselines3; SB3's
        hyperparameter keywords (``learning_rate=``, ``gamma=``, ...) are refused with the ``config`` entry that
        sets them."""
        name = type(self).__name__
        target = self._sb3_arguments(policy_or_env, env, kwargs.pop('policy', None))
        for key, value in kwargs.items():
            refusal = sb3_keyword_refusal(key, value, name, self.algo, self.net_keys)
            if refusal is None:
                raise TypeError(f'{name}() got an unexpected keyword argument {key!r}')
            raise AgentError(refusal)
        if not isinstance(seed, numbers.Integral) or isinstance(seed, bool) or seed < 0:
            raise AgentError(f'seed must be an int >= 0, got {seed!r}')
        self._verbose = int(verbose or 0)
        self._log_dir = tensorboard_log
        try:
            source = env_source(self.default_env if target is None else target, name)
        except EnvRefusal as e:
            raise AgentError(str(e)) from None
        spaces = None
        env_section: Dict[str, object] = {'env_id': source.env_id}
        if source.maker is not None:  # the user's callable: made once here for its spaces and its name
            probe = source.maker()
            if not (hasattr(probe, 'observation_space') and hasattr(probe, 'action_space')):
                raise AgentError(f'the env callable returned {type(probe).__name__}, not an env (with '
                                 f'observation_space and action_space)')
            env_section['env_id'] = maker_name(probe)
            env_section['max_episode_steps'] = time_limit(probe)  # what it is, for the config (not applied)
            spaces = probe.observation_space, probe.action_space
            probe.close()
        if source.kwargs:
            env_section['env_kwargs'] = source.kwargs
        if source.max_episode_steps is not None:
            env_section['max_episode_steps'] = source.max_episode_steps
        user = _merge(self.settings(), {'env': env_section, 'seed': int(seed)})
        if config is not None:
            if not isinstance(config, Mapping):
                raise AgentError(f'config must be a dict of overrides, got {type(config).__name__}')
            _merge(user, config)
        # a torch.device goes to the policy as it is; a name is in the config
        self._device: DeviceLike = None if device is None or isinstance(device, str) else device
        if isinstance(device, str):
            _merge(user, {'policy': {'device': device}})
        problems = config_problems(user, self.algo, env_check=source.maker is None)
        if problems:
            raise AgentError(format_problems(problems)[len('error: '):])
        try:
            cfg = compile_config(user, policy=self.algo)
        except ConfigError as e:
            raise AgentError(format_problems(e.errors)[len('error: '):]) from None
        self._maker = source.maker
        self._setup(cfg, spaces)

    @classmethod
    def _sb3_arguments(cls, first: object, env: object, policy: object) -> object:
        """The env among the first two arguments: ``(env)``, ``(env=...)`` or Stable-Baselines3's
        ``('MlpPolicy', env)`` / ``(policy='MlpPolicy', env=...)``; a refused SB3 policy name or a second env
        is an ``AgentError``."""
        name = cls.__name__
        given = sb3_policy_name(first)
        if policy is not None:
            if given is not None:
                raise AgentError(f'two policy names given ({first!r} and policy={policy!r}): give one')
            given = sb3_policy_name(policy) or str(policy)
            if first is not None:
                if env is not None:
                    raise AgentError(f'two envs given ({first!r} and env={env!r}): give one')
                env, first = first, None
        if given is not None:
            refusal = sb3_policy_refusal(given, name)
            if refusal is not None:
                raise AgentError(refusal)
            return env
        if first is not None and env is not None:
            if isinstance(env, int) and not isinstance(env, bool):
                raise AgentError(f'the second argument is the env (Stable-Baselines3\'s order: '
                                 f'agents.{name}("MlpPolicy", env)); give the seed as seed={env}')
            raise AgentError(f'two envs given ({first!r} and {env!r}): give one, e.g. agents.{name}({first!r})')
        return env if first is None else first

    @classmethod
    def describe_config(cls, config: Optional[Mapping[str, object]] = None) -> str:
        """Every config key of this agent, one per line: its default (this agent's settings, with ``config``'s
        overrides) and what is allowed (``print(agents.DQN.describe_config())``). A key ``policy.learn.x`` is
        set with ``config={'policy': {'learn': {'x': ...}}}``."""
        user = _merge(cls.settings(), {'env': {'env_id': cls.default_env}})
        if config is not None:
            _merge(user, config)
        header = (f"# agents.{cls.__name__}: every config key (set policy.learn.x with config={{'policy': "
                  f"{{'learn': {{'x': ...}}}}}}): key, default, allowed")
        return format_config_table(config_table(cls.algo, user), header)

    # ------------------------------------------------------------------ per algorithm
    @classmethod
    def settings(cls) -> Dict[str, object]:
        """The example's user config (a fresh copy) that ``config`` overrides."""
        raise NotImplementedError

    def _build_policy(self, cfg: EasyDict, device: DeviceLike) -> Any:  # the algorithm's own Policy subclass
        """The policy for ``cfg`` on ``device`` (``None``: the config's), sized by the env's spaces."""
        raise NotImplementedError

    def _use(self, collector_env: EnvManager, evaluator_env: EnvManager) -> None:
        raise NotImplementedError

    def _act(self, obs: np.ndarray, deterministic: bool) -> np.ndarray:
        raise NotImplementedError

    def _env_fn(self) -> Union[str, Callable[[], gym.Env]]:
        """What ``EnvManager`` makes the training envs with: the user's callable, else the env id (with the
        config's ``env_kwargs`` and time limit, when it has them)."""
        if self._maker is not None:
            return self._maker
        kwargs, limit = dict(self.cfg.env.get('env_kwargs') or {}), self.cfg.env.get('max_episode_steps')
        if not kwargs and limit is None:
            return self.env_id
        return GymEnvFn(self.env_id, limit, kwargs)

    def _make_env(self, render_mode: Optional[str] = None) -> object:
        """One env as the agent's ``evaluate`` plays it (``render_mode``: ``'human'``, ``'rgb_array'``)."""
        mode = {'render_mode': render_mode} if render_mode else {}
        if self._maker is not None:
            return self._maker(**mode)
        return make_gym_env(self.env_id, self.cfg.env.get('max_episode_steps'),
                            **dict(self.cfg.env.get('env_kwargs') or {}), **mode)

    # ------------------------------------------------------------------ shared
    def _setup(self, cfg: object, spaces: Optional[Tuple[object, object]] = None) -> None:
        """Take ``cfg`` and the env's spaces (``spaces``, else those of ``cfg.env.env_id``, made once), check
        that the agents can act on them, and build the policy."""
        self._set_spaces(cfg, spaces)
        self._build()

    def _set_spaces(self, cfg: Any, spaces: Optional[Tuple[Any, Any]]) -> None:
        self.cfg = cfg
        self.env_id: str = cfg.env.env_id
        self._env_refusal: Optional[str] = None  # set by load: why this agent's env must not be made
        if spaces is None:
            try:
                probe = make_gym_env(self.env_id, cfg.env.get('max_episode_steps'),
                                     **dict(cfg.env.get('env_kwargs') or {}))
            except (UnknownEnvError, ImportError) as e:
                raise AgentError(str(e).splitlines()[0]) from None
            spaces = probe.observation_space, probe.action_space
            probe.close()
        obs_space, act_space = spaces
        self.action_space: gym.Space = act_space
        if not isinstance(obs_space, gym.spaces.Box) or len(obs_space.shape) != 1:
            raise AgentError(f'{self.env_id} observations are {obs_space}: the agents take flat Box '
                             f'observations (a vector per step); build a pipeline for others (README)')
        self.observation_space: gym.spaces.Box = obs_space

    def _build(self) -> None:
        try:
            self.policy = self._build_policy(self.cfg, self._device)
        except DeviceError as e:  # e.g. 'cuda' on a machine without a GPU
            raise AgentError(str(e)) from None
        self._ctx = OnlineRLContext()
        self._buffer: Optional[DequeBuffer] = None

    def _check_env(self) -> None:
        """``AgentError`` when this agent's env must not be made (a loaded file's ``module:Name`` id)."""
        if self._env_refusal is not None:
            raise AgentError(self._env_refusal)

    @property
    def env_step(self) -> int:
        """Env steps trained on so far (over every ``train`` call, and before ``save`` for a loaded agent)."""
        return int(self._ctx.env_step)

    def train(self, max_env_step: int, stop_value: Optional[float] = None, log_dir: Optional[str] = None,
              progress: Optional[bool] = None, threads: Optional[int] = 1) -> Dict[str, object]:
        """Train for up to ``max_env_step`` more env steps; stop early once an evaluation's mean return
        reaches ``stop_value`` (default: the config's ``env.stop_value``, 475 for the CartPole settings;
        ``float('inf')`` never stops early). ``log_dir``: TensorBoard logs there (default the constructor's
        ``tensorboard_log``); ``progress``: a progress line (default: with ``verbose=1``). ``threads``: torch
        threads while training (1, as the examples' ``--threads``, is fastest for small nets; None keeps
        torch's setting). Returns ``env_step``, ``train_iter``, ``last_eval`` (the last evaluation's mean
        return, ``-inf`` before any), ``solved`` and ``interrupted`` (Ctrl-C: the agent keeps what it
        learned). :meth:`learn` is the same, Stable-Baselines3's way (it returns the agent)."""
        if not isinstance(max_env_step, int) or isinstance(max_env_step, bool) or max_env_step < 1:
            raise AgentError(f'max_env_step must be a positive int, got {max_env_step!r}')
        self._check_env()
        log_dir = self._log_dir if log_dir is None else log_dir
        progress = self._verbose > 0 if progress is None else bool(progress)
        cfg = copy.deepcopy(self.cfg)
        if stop_value is not None:
            cfg.env.stop_value = None if stop_value == float('inf') else float(stop_value)
        self._train_cfg = cfg
        e = cfg.env
        try:
            collector_env = EnvManager(self._env_fn(), e.collector_env_num, seed=cfg.seed)
        except (UnknownEnvError, ImportError) as err:  # e.g. a loaded file's env that is not registered here
            raise AgentError(str(err).splitlines()[0]) from None
        evaluator_env = EnvManager(self._env_fn(), e.evaluator_env_num, seed=cfg.seed + 10_000)
        until = self.env_step + max_env_step
        logger = None
        ctx = OnlineRLContext()  # a fresh context that continues the counters of earlier train calls
        for k in COUNTER_KEYS:
            if hasattr(self._ctx, k) and hasattr(ctx, k):
                setattr(ctx, k, getattr(self._ctx, k))
        import torch  # lazy: importing the agents does not load torch

        torch_threads = torch.get_num_threads()
        if threads is not None:
            torch.set_num_threads(threads)
        try:
            with task.start(ctx=ctx):
                self._use(collector_env, evaluator_env)
                if log_dir is not None or progress:
                    logger = online_logger(log_dir=None if log_dir is None else os.path.abspath(log_dir),
                                           tensorboard=log_dir is not None, progress=progress,
                                           total_env_step=until)
                    task.use(logger)
                task.use(termination_checker(max_env_step=until))
                ctx, interrupted = run_pipeline()
        finally:
            torch.set_num_threads(torch_threads)
            if logger is not None:
                logger.close()
            collector_env.close()
            evaluator_env.close()
        self._ctx = ctx
        last = float(ctx.last_eval_value)
        stop = cfg.env.stop_value
        return {'env_step': int(ctx.env_step), 'train_iter': int(ctx.train_iter), 'last_eval': last,
                'solved': stop is not None and last >= stop, 'interrupted': interrupted}

    def learn(self, total_timesteps: Union[int, float], progress_bar: bool = False, stop_value: Optional[float] = None,
              log_dir: Optional[str] = None, threads: Optional[int] = 1,
              reset_num_timesteps: Optional[bool] = None, **kwargs: object) -> 'Agent':
        """Stable-Baselines3's ``learn``: :meth:`train` for ``total_timesteps`` more env steps (an int, or an
        integral float such as ``1e5``), with ``progress_bar`` as ``progress``; returns the agent (so that
        ``agents.PPO('MlpPolicy', env).learn(10_000)`` chains), where ``train`` returns the run's figures.
        Like ``train`` (unlike SB3) it stops early once an evaluation reaches the config's ``env.stop_value``
        (``stop_value=float('inf')``: never). The counters always continue (SB3's
        ``reset_num_timesteps=False``); SB3's ``callback``, ``log_interval`` and ``tb_log_name`` are refused
        with what to use instead."""
        name = type(self).__name__
        instead = {'callback': 'add middleware to a pipeline (docs/runtime.md), or call learn() in steps',
                   'tb_log_name': 'log_dir= names the TensorBoard folder',
                   'log_interval': 'progress_bar=True prints a progress line every few seconds'}
        for key in kwargs:
            if key not in instead:
                raise TypeError(f'{name}.learn() got an unexpected keyword argument {key!r}')
            raise AgentError(f'{name}.learn() takes no {key}= (Stable-Baselines3\'s): {instead[key]}')
        if reset_num_timesteps:
            raise AgentError(f'{name}.learn(reset_num_timesteps=True): the counters here always continue '
                             f'(env_step); make a new agent to start from zero')
        steps = total_timesteps
        if isinstance(steps, float) and steps.is_integer():
            steps = int(steps)
        if not isinstance(steps, numbers.Integral) or isinstance(steps, bool) or steps < 1:
            raise AgentError(f'total_timesteps must be a positive int, got {total_timesteps!r}')
        self.train(int(steps), stop_value=stop_value, log_dir=log_dir, progress=progress_bar or None,
                   threads=threads)
        return self

    def predict(self, obs: object, deterministic: bool = True) -> np.ndarray:
        """The action for one observation (shaped like the env's), or the actions for a batch of them
        (one more leading axis). ``deterministic=False`` samples as training does (DQN: eps-greedy with the
        final eps). The actions fit the env as gymnasium makes it (``env.step(action)``). Unlike
        Stable-Baselines3's ``predict`` (``action, state = model.predict(obs)``, not deterministic by default)
        it returns the action alone, deterministic by default."""
        x = np.asarray(obs, dtype=np.float32)
        shape = tuple(self.observation_space.shape)
        if x.shape == shape:
            return self._act(x[None], deterministic)[0]
        if x.ndim == len(shape) + 1 and x.shape[1:] == shape and x.shape[0] > 0:
            return self._act(x, deterministic)
        raise AgentError(f'predict: {self.env_id} observations have shape {shape} (or a batch (n, '
                         f'{", ".join(map(str, shape))})), got shape {x.shape}')

    def evaluate(self, episodes: int = 10, seed: int = 0, render: bool = False,
                 video_dir: Optional[str] = None, verbose: bool = False) -> List[float]:
        """Play ``episodes`` episodes with the deterministic policy and return their returns (``render``:
        in a window; ``video_dir``: record mp4s, needs the ``video`` extra; ``verbose``: print each)."""
        if not isinstance(episodes, int) or episodes < 1:
            raise AgentError(f'episodes must be a positive int, got {episodes!r}')
        self._check_env()
        try:
            return play_policy(lambda b: self.predict(b), self._make_env, episodes=episodes, seed=seed,
                               render=render, video_dir=video_dir, print_fn=print if verbose else (lambda _: None))
        except SystemExit as e:  # what the examples' --play says on the command line, e.g. a missing package
            raise AgentError(str(e.code).replace('error: ', '', 1)) from None

    def save(self, path: str) -> str:
        """Write the policy (weights, optimizer state), the config and the counters to ``path`` in the
        examples' checkpoint format (not the replay buffer: a loaded DQN or SAC agent refills it before it
        updates again); returns the absolute path."""
        from ..envs.saved_spaces import spaces_to_plain  # lazy: loads torch and gymnasium

        full = os.path.abspath(os.path.expanduser(path))
        save_checkpoint(full, self.policy, self._ctx, extra={
            'config': to_plain(self.cfg), 'policy_type': self.algo,
            'spaces': spaces_to_plain(self.observation_space, self.action_space)})
        return full

    @classmethod
    def load(cls, path: str, device: DeviceLike = 'auto', env_id: Optional[str] = None,
             max_params: Optional[int] = MAX_LOADED_PARAMS) -> 'Agent':
        """The agent saved in ``path`` by :meth:`save` or by an example (``<exp>/<n>/ckpt/*.pth.tar``), on
        ``device`` (default ``'auto'``: the GPU when there is one) whatever device it was trained on.

        The file is data: its config is checked against the schema (every bad key named), its networks are
        sized from the spaces it stores, not from an env, and refused above ``max_params`` parameters
        (``None``: no limit). ``env_id``: the env that :meth:`train` and :meth:`evaluate` make (default the
        saved one); a saved id of the form ``module:Name`` would import ``module``, so such an agent acts
        (``predict``) but makes no env until you name it here."""
        from ..policy.loading import (check_network_size, config_for_device,  # lazy: the policies load torch
                                      env_id_refusal, saved_or_env_spaces, saved_policy)

        if not os.path.isfile(path):
            raise AgentError(f'no checkpoint file at {path!r}')
        how = f'name it yourself: {cls.__name__}.load(path, env_id=...)'
        try:
            saved = saved_policy(path)
            if saved.kind != cls.algo:
                raise AgentError(f'{path!r} holds a {saved.kind.upper()} policy: load it with '
                                 f'agents.{saved.kind.upper()}.load')
            spaces = saved_or_env_spaces(saved, env_id, how)
            cfg = config_for_device(saved.config, device)
            if env_id is not None:
                cfg.env.env_id = env_id
            agent = cls.__new__(cls)
            agent._device = None if isinstance(device, str) else device
            agent._set_spaces(cfg, spaces)
            if env_id is None:
                agent._env_refusal = env_id_refusal(repr(path), saved.env_id, how)
            check_network_size(path, lambda c: agent._build_policy(c, None), cfg, max_params,
                               f'raise it: {cls.__name__}.load(path, max_params=N)')
            agent._build()
            load_checkpoint(path, agent.policy, agent._ctx)
        except (CheckpointError, UnknownEnvError, ImportError) as e:
            raise AgentError(str(e).splitlines()[0]) from None
        return agent

    def __repr__(self) -> str:
        return f'{type(self).__name__}({self.env_id!r}, seed={self.cfg.seed}, env_step={self.env_step})'


class DQN(Agent):
    """DQN (double, dueling, n-step) on a discrete-action env, with ``examples/dqn_cartpole.py``'s settings."""

    algo = 'dqn'
    net_keys = 'policy.model.encoder_hidden_size_list (and head_hidden_size, dueling)'

    @classmethod
    def settings(cls) -> Dict[str, object]:
        return copy.deepcopy(DQN_CARTPOLE)

    def _build_policy(self, cfg: EasyDict, device: DeviceLike) -> DQNPolicy:
        from ..policy import DQNPolicy  # lazy: the policies load torch
        from ..policy.common import discrete_action_count  # lazy: the policies load torch

        cfg.policy.model.obs_shape = int(np.prod(self.observation_space.shape))
        try:
            cfg.policy.model.action_shape = discrete_action_count(self.action_space, 'DQN')
        except ValueError as e:
            raise AgentError(str(e).splitlines()[0]) from None
        return DQNPolicy(cfg, seed=cfg.seed, device=device)

    def _use(self, collector_env: EnvManager, evaluator_env: EnvManager) -> None:
        if self._buffer is None:
            self._buffer = dqn_buffer(self.cfg)
        cfg = self._train_cfg
        use_dqn(cfg, self.policy, self._buffer, collector_env, evaluator_env,
                min_collect_return=cfg.env.stop_value)

    def _act(self, obs: np.ndarray, deterministic: bool) -> np.ndarray:
        if deterministic:
            return self.policy.eval_mode(obs)
        return self.policy.collect_mode(obs, eps=float(self.cfg.policy.other.eps.end))


class PPO(Agent):
    """PPO (clipped, GAE) on a discrete or continuous-action env, with ``examples/ppo_cartpole.py``'s settings."""

    algo = 'ppo'
    net_keys = 'policy.model.hidden (actor and critic; activation, ortho_init)'

    @classmethod
    def settings(cls) -> Dict[str, object]:
        return copy.deepcopy(PPO_CARTPOLE)

    def _build_policy(self, cfg: EasyDict, device: DeviceLike) -> PPOPolicy:
        from ..policy.ppo import PPOPolicy  # lazy: the policies load torch

        return PPOPolicy(cfg, self.observation_space, self.action_space, seed=cfg.seed, device=device)

    def _use(self, collector_env: EnvManager, evaluator_env: EnvManager) -> None:
        use_ppo(self._train_cfg, self.policy, collector_env, evaluator_env)

    def _act(self, obs: np.ndarray, deterministic: bool) -> np.ndarray:
        if deterministic:
            return self.policy.eval_mode(obs)
        return self.policy.collect_mode(obs)['env_action']


class SAC(Agent):
    """SAC on a continuous-action env (Pendulum-v1 by default; MuJoCo ids need the ``mujoco`` extra), with
    ``examples/sac_mujoco.py``'s settings. It trains on actions rescaled to [-1, 1] and float32
    observations (:mod:`pipeline.envs.mujoco`); ``predict`` returns actions in the env's own bounds."""

    algo = 'sac'
    default_env = 'Pendulum-v1'
    net_keys = 'policy.model.actor_hidden_size_list and policy.model.critic_hidden_size_list'

    @classmethod
    def settings(cls) -> Dict[str, object]:
        return {'exp_name': 'sac', 'env': {'collector_env_num': 1, 'evaluator_env_num': 5, 'n_evaluator_episode': 5,
                                           'stop_value': None},
                'policy': sac_policy_settings(1)}

    def _env_fn(self) -> Callable[[], gym.Env]:
        if self._maker is not None:
            return RescaledEnvFn(self._maker)
        return MujocoEnvFn(self.env_id, max_episode_steps=self.cfg.env.get('max_episode_steps'),
                           **dict(self.cfg.env.get('env_kwargs') or {}))

    def _build_policy(self, cfg: EasyDict, device: DeviceLike) -> SACPolicy:
        from ..policy.sac import SACPolicy  # lazy: the policies load torch

        if not isinstance(self.action_space, gym.spaces.Box):
            raise AgentError(f'SAC needs continuous actions (a Box space); {self.env_id} has '
                             f'{type(self.action_space).__name__}: use agents.DQN or agents.PPO')
        self._low = self.action_space.low.astype(np.float32)
        self._high = self.action_space.high.astype(np.float32)
        return SACPolicy(cfg, obs_shape=int(np.prod(self.observation_space.shape)),
                         action_shape=int(np.prod(self.action_space.shape)), seed=cfg.seed, device=device)

    def _use(self, collector_env: EnvManager, evaluator_env: EnvManager) -> None:
        from ..data import DequeBuffer  # lazy: the replay buffers load torch

        if self._buffer is None:
            self._buffer = DequeBuffer(self.cfg.policy.other.replay_buffer.replay_buffer_size, seed=self.cfg.seed)
        use_sac(self._train_cfg, self.policy, self._buffer, collector_env, evaluator_env)

    def _act(self, obs: np.ndarray, deterministic: bool) -> np.ndarray:
        import torch  # lazy: importing the agents does not load torch

        if deterministic:
            a = np.asarray(self.policy.eval_mode(obs), dtype=np.float32)
        else:
            with torch.no_grad():
                a = self.policy.actor.sample(torch.as_tensor(obs, device=self.policy.device))[0].cpu().numpy()
        return self._low + (np.clip(a, -1.0, 1.0) + 1.0) * 0.5 * (self._high - self._low)
