"""Running a saved policy: ``play_policy`` (any env, with ``--render`` / ``--video``) and
``play_without_rendering`` (``--play`` for envs without rendering). Importing this module loads neither torch
nor gymnasium."""
from __future__ import annotations

import argparse
import os
from typing import Any, Callable, Dict, List, Optional

__all__ = ['play_policy', 'play_without_rendering']


def play_policy(policy: Callable[[Any], Any], make_env: Callable[[Optional[str]], Any], episodes: int = 5,
                seed: int = 0, render: bool = False, video_dir: Optional[str] = None,
                print_fn: Callable[[str], None] = print) -> List[float]:
    """Run ``episodes`` episodes of ``policy`` (``policy(obs_batch) -> actions``, e.g. from
    :func:`pipeline.policy.load_policy`) and print each return. ``make_env(render_mode)`` returns a
    gymnasium env; ``render`` shows it in a window (``render_mode='human'``), ``video_dir`` records
    every episode there with gymnasium's ``RecordVideo`` (needs ``moviepy``). Returns the returns."""
    import numpy as np

    if episodes < 1:
        raise SystemExit(f'error: --episodes must be >= 1, got {episodes}')
    mode = 'human' if render else ('rgb_array' if video_dir else None)
    try:
        env = make_env(mode)
        if video_dir:
            import gymnasium as gym
            try:
                import moviepy  # noqa: F401
            except ImportError:
                raise SystemExit("error: --video needs moviepy: pip install moviepy (or pip install -e '.[video]')") \
                    from None
            env = gym.wrappers.RecordVideo(env, os.path.abspath(video_dir), episode_trigger=lambda i: True,
                                           disable_logger=True)
    except ImportError as e:  # gymnasium's DependencyNotInstalled is an ImportError
        raise SystemExit(f"error: rendering needs an extra package ({e}); try pip install -e '.[video]'") from None
    returns: List[float] = []
    try:
        for ep in range(episodes):
            obs, _ = env.reset(seed=seed + ep)
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


def play_without_rendering(path: str, policy: Any, make_env: Callable[[], Any], args: argparse.Namespace,
                    env_name: str) -> Dict[str, Any]:
    """``--play`` for an env without rendering (``env_name`` says which, in the refusal of ``--render`` /
    ``--video``): load the checkpoint into ``policy`` (built as for training) and run ``args.episodes``
    episodes of its eval mode on ``make_env()``. Returns ``{'play_returns': [...]}``."""
    from middleware import load_checkpoint

    if args.render or args.video:
        raise SystemExit(f'error: {env_name} has no rendering; use --play without --render/--video')
    load_checkpoint(path, policy)
    returns = play_policy(policy.eval_mode, lambda mode: make_env(), episodes=args.episodes, seed=args.seed)
    return {'play_returns': returns}
