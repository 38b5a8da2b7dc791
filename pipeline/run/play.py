"""Running a saved policy: ``play_policy`` (any env, with ``--render`` / ``--video``), ``saved_play_policy``
(``--play CKPT``: the policy rebuilt from the file's checked config, and the env it was trained on) and
``play_without_rendering`` (``--play`` for envs without rendering). Importing this module loads neither torch
nor gymnasium."""
from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional

from ..checkpoint import CheckpointError, load_checkpoint
from .precheck import usage_error

if TYPE_CHECKING:  # the policies load torch; this module is on the --help path
    from ..policy import Policy

__all__ = ['play_policy', 'play_without_rendering', 'render_problem', 'saved_play_policy', 'play_env_refusal',
           'ENV_FLAG_HINT', 'PARAMS_FLAG_HINT']

#: how a user of ``--play`` names the env of a file whose env id would import a module
ENV_FLAG_HINT = 'name it yourself: --set env.env_id=<that id>'
#: how a user of ``--play`` lifts the parameter limit on the networks a file's config builds
PARAMS_FLAG_HINT = 'raise the limit: --max-params N'


def play_env_refusal(path: str, saved_env_id: object, named_env_id: object) -> Optional[str]:
    """``--play``'s one-line refusal of a file whose env id has the form ``module:Name`` (making it would
    import ``module``), unless the run names that very id (``--set env.env_id=...`` or ``--env``)."""
    from ..policy.loading import env_id_refusal  # lazy: the policies load torch

    if named_env_id == saved_env_id:
        return None
    return env_id_refusal(repr(path), saved_env_id, ENV_FLAG_HINT)


def saved_play_policy(path: str, args: argparse.Namespace, named_env_id: object) -> Policy:
    """``--play CKPT``: the policy rebuilt from the file (its config checked, sized from its stored spaces,
    refused above ``--max-params``) on ``--device``; its ``saved_config`` names the env. Bad input (a
    damaged or edited file, a ``module:Name`` env id the run does not name) ends the run with one line."""
    from ..policy.loading import policy_from_saved, saved_policy  # lazy: the policies load torch

    try:
        saved = saved_policy(path)
        refusal = play_env_refusal(path, saved.env_id, named_env_id)
        if refusal is not None:
            raise CheckpointError(refusal)
        return policy_from_saved(saved, getattr(args, 'device', None) or 'auto',
                                 env_id=saved.env_id if named_env_id == saved.env_id else None,
                                 max_params=args.max_params, how_env=ENV_FLAG_HINT, how_params=PARAMS_FLAG_HINT)
    except CheckpointError as e:
        usage_error(f'error: {e}')


def play_policy(policy: Callable[[object], object], make_env: Callable[[Optional[str]], object], episodes: int = 5,
                seed: int = 0, render: bool = False, video_dir: Optional[str] = None,
                print_fn: Callable[[str], None] = print) -> List[float]:
    """Run ``episodes`` episodes of ``policy`` (``policy(obs_batch) -> actions``, e.g. from
    :func:`pipeline.policy.load_policy`) and print each return. ``make_env(render_mode)`` returns a
    gymnasium env; ``render`` shows it in a window (``render_mode='human'``), ``video_dir`` records
    every episode there with gymnasium's ``RecordVideo`` (needs ``moviepy``). When ``render`` cannot open a
    window (no display, or the env's renderer needs a package that is missing, e.g. pygame) it prints one
    line saying so and what to install, and plays on without a window. Returns the returns."""
    if episodes < 1:
        raise SystemExit(f'error: --episodes must be >= 1, got {episodes}')
    if render:
        problem = render_problem()
        if problem is not None:
            print_fn(f'--render: {problem}; playing without a window ({RENDER_HINT})')
            render = False
    try:
        return _play(policy, make_env, episodes, seed, render, video_dir, print_fn)
    except _NoRenderer as e:  # the env's renderer is missing (e.g. pygame): play on without a window
        print_fn(f'--render: {e}; playing without a window ({RENDER_HINT})')
        return _play(policy, make_env, episodes, seed, False, video_dir, print_fn)


#: what the one-line note of a ``--render`` that cannot show a window suggests
RENDER_HINT = "for a window: pip install -e '.[video]' on a machine with a display; or record with --video DIR"


class _NoRenderer(Exception):
    """The env could not render in a window for want of a package."""


def render_problem() -> Optional[str]:
    """Why ``render_mode='human'`` cannot show a window here (Linux without ``DISPLAY``/``WAYLAND_DISPLAY``),
    or ``None``. A renderer's missing package (e.g. pygame) shows only when the env first draws."""
    if sys.platform.startswith('linux') and not (os.environ.get('DISPLAY') or os.environ.get('WAYLAND_DISPLAY')):
        return 'no display to open a window on'
    return None


def _first_clause(e: BaseException) -> str:
    """``'pygame is not installed'`` from gymnasium's ``'pygame is not installed, run `pip install ...`'``
    (the one-line note names rlpipe's extra instead)."""
    return str(e).splitlines()[0].split(', run `')[0] if str(e) else type(e).__name__


def _missing_package(e: BaseException) -> bool:
    """Whether ``e`` says a package is missing (``ImportError`` or gymnasium's ``DependencyNotInstalled``)."""
    return isinstance(e, ImportError) or type(e).__name__ == 'DependencyNotInstalled'


def _play(policy: Callable[[object], object], make_env: Callable[[Optional[str]], Any], episodes: int, seed: int,
          render: bool, video_dir: Optional[str], print_fn: Callable[[str], None]) -> List[float]:
    import numpy as np  # lazy: keeps importing pipeline.run (and --help) light

    mode = 'human' if render else ('rgb_array' if video_dir else None)
    try:
        env = make_env(mode)
        if video_dir:
            import gymnasium as gym  # lazy: keeps importing pipeline.run (and --help) light
            try:
                import moviepy  # noqa: F401  (lazy: an optional extra, checked when --video needs it)
            except ImportError:
                raise SystemExit("error: --video needs moviepy: pip install moviepy (or pip install -e '.[video]')") \
                    from None
            env = gym.wrappers.RecordVideo(env, os.path.abspath(video_dir), episode_trigger=lambda i: True,
                                           disable_logger=True)
    except Exception as e:  # noqa: BLE001 - ImportError or gymnasium's DependencyNotInstalled
        if not _missing_package(e):
            raise
        if render:
            raise _NoRenderer(_first_clause(e)) from None
        raise SystemExit(f"error: rendering needs an extra package ({e}); try pip install -e '.[video]'") from None
    returns: List[float] = []
    try:
        for ep in range(episodes):
            try:
                obs, _ = env.reset(seed=seed + ep)
            except Exception as e:  # noqa: BLE001 - renderers import their packages on the first frame
                if render and ep == 0 and _missing_package(e):
                    raise _NoRenderer(_first_clause(e)) from None
                raise
            ret, length, done = 0.0, 0, False
            while not done:
                action = np.asarray(policy(np.asarray(obs, dtype=np.float32)[None]))[0]
                obs, r, terminated, truncated, _ = env.step(action)
                ret += float(r)
                length += 1
                done = terminated or truncated
            returns.append(ret)
            print_fn(f'episode {ep + 1}: return {ret:.1f} ({length} steps)')
    finally:
        env.close()
    print_fn(f'mean return over {episodes} episodes: {sum(returns) / len(returns):.1f}'
             + (f'; videos in {os.path.abspath(video_dir)}' if video_dir else ''))
    return returns


def play_without_rendering(path: str, policy: Any, make_env: Callable[[], object], args: argparse.Namespace,
                    env_name: str) -> Dict[str, object]:
    """``--play`` for an env without rendering (``env_name`` says which, in the refusal of ``--render`` /
    ``--video``): load the checkpoint into ``policy`` (built as for training) and run ``args.episodes``
    episodes of its eval mode on ``make_env()``. Returns ``{'play_returns': [...]}``."""
    if args.render or args.video:
        raise SystemExit(f'error: {env_name} has no rendering; use --play without --render/--video')
    load_checkpoint(path, policy)
    returns = play_policy(policy.eval_mode, lambda mode: make_env(), episodes=args.episodes, seed=args.seed)
    return {'play_returns': returns}
