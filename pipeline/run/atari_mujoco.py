"""What the Atari and MuJoCo examples share (``examples/dqn_atari.py``, ``ppo_atari.py``,
``sac_mujoco.py``): their env flags, their env managers, and the start, ``--play`` and end of a run
around the pipeline each example builds itself. Built on :mod:`pipeline.run` (run folders,
``--set``, ``--resume``, ``--play``, ``--middleware``); like it, importing this module loads neither
torch nor gymnasium, so ``--help`` answers at once.

An example reads top to bottom::

    parser = example_parser(__doc__, exp_name='atari_dqn', max_env_step=3_000_000)
    add_env_flags(parser, env='PongNoFrameskip-v4', env_num=8, eval_episodes=4)
    args = parser.parse_args(argv)
    run = start_run(args, user_config(args))      # --set, logging, torch threads, checks --resume/--play
    if run.play:
        return play_checkpoint(run, args, build_policy, atari_play_env)
    cfg = compile_run_config(run, 'dqn')
    collector_env, evaluator_env = atari_envs(cfg, args.backend)
    ...                                            # policy, checkpointer(...), run_logger(...), the pipeline
    return finish_run(run, ctx, interrupted, t0, ckpt, logger, [collector_env, evaluator_env], script=__file__)
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from typing import TYPE_CHECKING, Any, Callable, Dict, Mapping, Optional, Sequence, Tuple

from easydict import EasyDict

from ..checkpoint import CheckpointError, load_checkpoint, read_checkpoint
from .console import node_print, setup_logging
from .play import PARAMS_FLAG_HINT, play_env_refusal, play_policy
from .precheck import compile_or_exit, usage_error
from .prepare import RunInfo, prepare_run

if TYPE_CHECKING:  # they load gymnasium and numpy; this module is on the --help path
    from contexts import OnlineRLContext
    from middleware.ckpt_handler import BufferFiles, CkptSaver
    from middleware.functional.logger import LoggerMiddleware
    from ..envs import EnvManager

__all__ = ['add_env_flags', 'add_smoke_flag', 'env_config', 'start_run', 'compile_run_config', 'checkpointer', 'run_logger',
           'atari_envs', 'mujoco_envs', 'atari_play_env', 'mujoco_play_env', 'play_checkpoint', 'finish_run']


def add_env_flags(parser: argparse.ArgumentParser, env: str, env_num: int, eval_episodes: int,
                  backends: Sequence[str] = ('sync', 'subprocess', 'envpool'),
                  backend: str = 'subprocess', exp_name_per_env: bool = True) -> argparse.ArgumentParser:
    """Add ``--env``, ``--backend``, ``--env-num``, ``--eval-episodes``, ``--max-episode-steps`` and
    ``--quiet`` (the rest of the settings are config entries: ``--set key=value``).

    ``exp_name_per_env``: with the default ``--exp-name`` (e.g. ``atari_dqn``), runs go to one folder per
    env, ``<exp-name>_<env>`` (``atari_dqn_PongNoFrameskip-v4``); needs a parser from ``example_parser``."""
    if exp_name_per_env:
        default = parser.get_default('exp_name')

        def name_per_env(ns: argparse.Namespace) -> None:
            if default is not None and ns.exp_name == default:
                ns.exp_name = f'{default}_{ns.env.split("/")[-1]}'

        if not hasattr(parser, 'after_parse'):
            raise TypeError('add_env_flags(exp_name_per_env=True) needs a parser made by example_parser')
        parser.after_parse.append(name_per_env)
    g = parser.add_argument_group('environment')
    g.add_argument('--env', default=env, help=f'gymnasium env id (default {env})')
    g.add_argument('--backend', default=backend, choices=list(backends),
                   help=f'where the envs run (default {backend}; see pipeline.envs.EnvManager)')
    g.add_argument('--env-num', type=int, default=env_num, help=f'collector envs (default {env_num})')
    g.add_argument('--eval-episodes', type=int, default=eval_episodes,
                   help=f'episodes per evaluation, one env each (default {eval_episodes})')
    g.add_argument('--max-episode-steps', type=int, default=None,
                   help="cut episodes after this many agent steps (smoke tests); default: the env's own limit")
    g.add_argument('--quiet', action='store_true', help='no log lines and no progress bar')
    return parser


def add_smoke_flag(parser: argparse.ArgumentParser, flags: Mapping[str, object], settings: Sequence[str] = ()) -> None:
    """Add ``--smoke``: a run of under a minute that shows the example works on this machine (its envs,
    updates, an evaluation and the checkpoints) before a run of hours; the example exits 0 when it ran.

    It is short for ``flags`` (argparse dests -> values, e.g. ``{'max_env_step': 2000}``; ``True`` for a
    switch) and ``settings`` (``key=value`` entries, as for ``--set``). Flags given on the command line
    win: a flag of ``flags`` is set only while it has its default, and the command line's own ``--set``
    entries come after ``settings``. Needs a parser from ``example_parser``."""
    if not hasattr(parser, 'after_parse'):
        raise TypeError('add_smoke_flag needs a parser made by example_parser')
    words = [f'--{dest.replace("_", "-")}' + ('' if value is True else f' {value}') for dest, value in flags.items()]
    words += [f'--set {item}' for item in settings]
    parser.add_argument('--smoke', action='store_true',
                        help='a run of under a minute that shows this example works here (envs, updates, an '
                             'evaluation, checkpoints; exit status 0 when it ran); short for '
                             + ' '.join(words).replace('%', '%%') + ' (flags given with it win)')

    def apply(ns: argparse.Namespace) -> None:
        if not getattr(ns, 'smoke', False):
            return
        for dest, value in flags.items():
            if getattr(ns, dest) == parser.get_default(dest):
                setattr(ns, dest, value)
        ns.set = [*settings, *ns.set]

    parser.after_parse.append(apply)


def env_config(args: argparse.Namespace, stop_value: Optional[float]) -> Dict[str, object]:
    """The config's ``env`` section from the env flags."""
    return {'env_id': args.env, 'collector_env_num': args.env_num, 'evaluator_env_num': args.eval_episodes,
            'n_evaluator_episode': args.eval_episodes, 'stop_value': stop_value,
            'max_episode_steps': args.max_episode_steps}


def start_run(args: argparse.Namespace, user_config: Mapping[str, object], policy: Optional[str] = None) -> RunInfo:
    """:func:`pipeline.run.prepare.prepare_run` (``--set``, checked ``--resume``/``--play`` paths; with
    ``policy``, the config and its gymnasium env id checked before torch loads), then
    logging (unless ``--quiet``), torch threads, freed memory kept for reuse
    (:func:`pipeline.cpu_memory.retain_freed_memory`), and the ``--resume``/``--play`` files read once: a
    corrupt or foreign file ends the run now, before anything is built."""
    run = prepare_run(args, user_config, policy=policy, env_check=policy is not None)
    if not getattr(args, 'quiet', False):
        setup_logging()
    import torch  # lazy: importing this module (and --help) does not load torch

    from pipeline.cpu_memory import retain_freed_memory

    torch.set_num_threads(args.threads)
    retain_freed_memory()  # an update's large temporaries reuse freed memory instead of new pages
    try:
        for path in (run.resume, run.play):
            if path:
                read_checkpoint(path)
    except CheckpointError as e:
        usage_error(f'error: {e}')  # exit status 2, as for any bad input
    return run


def compile_run_config(run: RunInfo, policy: str) -> EasyDict:
    """``compile_config(run.user_config, policy=policy)``; a config error (e.g. a misspelled ``--set``
    key) ends the run with the list of problems and exit status 2, before anything is built."""
    return compile_or_exit(run.user_config, policy)


def checkpointer(run: RunInfo, policy: object, cfg: Mapping[str, object], policy_type: str, train_freq: int,
                 buffer: Optional[BufferFiles] = None, spaces: Optional[Tuple[object, object]] = None) -> CkptSaver:
    """A ``CkptSaver`` under the run folder (made now) that saves the config (and the env's ``spaces``,
    ``(observation_space, action_space)``) with the weights and resumes from ``--resume`` (a checkpoint
    that does not fit the policy ends the run with its reason)."""
    from middleware import CkptSaver  # lazy: middleware loads numpy; --help stays fast

    try:
        return CkptSaver(policy, run.create_dir(), train_freq=train_freq, resume_from=run.resume, buffer=buffer,
                         config=cfg, policy_type=policy_type, spaces=spaces)
    except CheckpointError as e:
        run.abandon()
        usage_error(f'error: {e}')  # exit status 2, as for any bad input


def run_logger(run: RunInfo, args: argparse.Namespace, train_show_freq: int) -> LoggerMiddleware:
    """``online_logger`` writing TensorBoard logs to ``<run>/log``, with a progress bar unless
    ``--quiet`` / ``--no-progress``."""
    from middleware import online_logger  # lazy: middleware loads numpy; --help stays fast

    assert run.dir is not None, 'make the run folder first (checkpointer or run.create_dir)'
    return online_logger(log_dir=os.path.join(run.dir, 'log'), train_show_freq=train_show_freq,
                         progress=not (args.quiet or args.no_progress), total_env_step=args.max_env_step)


# --------------------------------------------------------------------------- envs
def atari_envs(cfg: EasyDict, backend: str) -> Tuple[EnvManager, EnvManager]:
    """Collector envs (episodic life, clipped rewards) and evaluation envs (whole games, raw scores)
    for ``cfg.env`` on ``backend``; EnvPool runs its own Atari with the same settings."""
    from ..envs import EnvManager  # lazy: the envs load gymnasium (and numpy)
    from ..envs.atari import AtariEnvFn, envpool_atari_kwargs, envpool_atari_task  # lazy: this module is on the --help path

    e = cfg.env
    n, m, seed = e.collector_env_num, e.evaluator_env_num, cfg.seed
    if backend == 'envpool':
        task_id = envpool_atari_task(e.env_id)
        kw_train, kw_eval = envpool_atari_kwargs(True), envpool_atari_kwargs(False)
        if e.max_episode_steps:
            kw_train['max_episode_steps'] = kw_eval['max_episode_steps'] = e.max_episode_steps
        return (EnvManager(task_id, n, seed=seed, backend='envpool', env_kwargs=kw_train),
                EnvManager(task_id, m, seed=seed + 10_000, backend='envpool', env_kwargs=kw_eval))
    limit = {'max_episode_steps': e.max_episode_steps} if e.max_episode_steps else {}
    return (EnvManager(AtariEnvFn(e.env_id, training=True, **limit), n, seed=seed, backend=backend),
            EnvManager(AtariEnvFn(e.env_id, training=False, **limit), m, seed=seed + 10_000, backend=backend))


def mujoco_envs(cfg: EasyDict, backend: str) -> Tuple[EnvManager, EnvManager]:
    """Collector and evaluation envs for ``cfg.env`` (gymnasium MuJoCo, actions in [-1, 1])."""
    from ..envs import EnvManager  # lazy: the envs load gymnasium (and numpy)
    from ..envs.mujoco import MujocoEnvFn  # lazy: this module is on the --help path

    e = cfg.env
    fn = MujocoEnvFn(e.env_id, max_episode_steps=e.max_episode_steps)
    return (EnvManager(fn, e.collector_env_num, seed=cfg.seed, backend=backend),
            EnvManager(fn, e.evaluator_env_num, seed=cfg.seed + 10_000, backend=backend))


def atari_play_env(env_id: str, render_mode: Optional[str] = None, max_episode_steps: Optional[int] = None) -> object:
    """One Atari env as the evaluator sees it (whole games, raw score), for ``--play``."""
    from ..envs.atari import make_atari_env  # lazy: loads gymnasium and ale-py

    extra: Dict[str, Any] = {'render_mode': render_mode} if render_mode else {}  # to gymnasium.make
    return make_atari_env(env_id, training=False, max_episode_steps=max_episode_steps, **extra)


def mujoco_play_env(env_id: str, render_mode: Optional[str] = None, max_episode_steps: Optional[int] = None) -> object:
    """One MuJoCo env as the evaluator sees it, for ``--play``."""
    from ..envs.mujoco import make_mujoco_env  # lazy: loads gymnasium and mujoco

    return make_mujoco_env(env_id, max_episode_steps, **({'render_mode': render_mode} if render_mode else {}))


# --------------------------------------------------------------------------- play and end
def play_checkpoint(run: RunInfo, args: argparse.Namespace, build_policy: Callable[[Any, Any, Any], Any],
                    make_env: Callable[[str, Optional[str], Optional[int]], Any]) -> Dict[str, object]:
    """``--play``: rebuild the policy with ``build_policy(cfg, observation_space, action_space)`` from the
    config saved in the checkpoint (checked against the schema; its networks refused above ``--max-params``)
    and the spaces saved with it, load its weights and run ``--episodes`` episodes of the env it was
    trained on (``make_env(env_id, render_mode, max_episode_steps)`` with the saved time limit;
    ``--render`` / ``--video DIR``), on ``--device`` (default auto) whatever device it was trained on. A
    saved ``module:Name`` env id is refused unless the run names it (``--env`` or ``--set env.env_id``).
    Returns ``{'play_returns': [...]}``."""
    from ..policy.loading import check_network_size, config_for_device, saved_policy  # lazy: loads torch

    assert run.play is not None
    try:
        saved = saved_policy(run.play)
        refusal = play_env_refusal(run.play, saved.env_id, run.user_config.get('env', {}).get('env_id'))
        if refusal is not None:
            raise CheckpointError(refusal)
    except CheckpointError as e:
        usage_error(f'error: {e}')  # exit status 2, as for any bad input
    if not saved.env_id:
        usage_error(f'error: {run.play!r} holds no training config (it was not saved by this example)')
    cfg = config_for_device(saved.config, getattr(args, 'device', None) or 'auto')
    env_id, limit = cfg.env.env_id, cfg.env.get('max_episode_steps')
    spaces = saved.spaces
    if spaces is None:  # a file written before the spaces were saved: the env (a registered id) tells them
        probe = make_env(env_id, None, limit)
        spaces = probe.observation_space, probe.action_space
        probe.close()
    try:
        check_network_size(run.play, lambda c: build_policy(c, *spaces), cfg, args.max_params, PARAMS_FLAG_HINT)
        policy = build_policy(cfg, *spaces)
        load_checkpoint(run.play, policy)
    except CheckpointError as e:
        usage_error(f'error: {e}')  # exit status 2, as for any bad input
    returns = play_policy(policy.eval_mode, lambda mode: make_env(env_id, mode, limit), episodes=args.episodes,
                          seed=args.seed, render=args.render, video_dir=args.video)
    return {'play_returns': returns}


def finish_run(run: RunInfo, ctx: OnlineRLContext, interrupted: bool, t0: float, ckpt: CkptSaver, logger: LoggerMiddleware,
               envs: Sequence[EnvManager],
               what: str = 'return', script: Optional[str] = None) -> Dict[str, object]:
    """Close the logger and ``envs``; unless interrupted (``run_pipeline`` already printed how to resume),
    print the last evaluation (``what``: 'score' or 'return'), the counts, and where the run folder,
    checkpoints and logs are (``script``: the example's ``__file__``, for the command that plays the
    evaluated policy). Returns the figures as a dict."""
    logger.close()
    for env in envs:
        env.close()
    wall = time.perf_counter() - t0
    result: Dict[str, object] = {'env_step': ctx.env_step, 'train_iter': ctx.train_iter, 'env_episode': ctx.env_episode,
              'last_eval': ctx.last_eval_value, 'wall_time': wall, 'run_dir': run.dir, 'interrupted': interrupted}
    if interrupted:
        return result
    node_print(f'\nlast mean eval {what} {ctx.last_eval_value:.1f} after {ctx.env_step} env steps, {ctx.train_iter} '
          f'updates, {wall:.0f} s ({ctx.env_step / max(wall, 1e-9):.0f} env steps/s)')
    run.print_paths(ckpt, script or run.script or sys.argv[0])
    return result
