"""Small traps of a newcomer's first hour (issue 27, item 9): the examples' run folders are ignored by
git, and MuJoCo's warnings go to logging instead of ``MUJOCO_LOG.TXT`` in the working directory."""
import fnmatch
import logging
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# the run folders the training examples make under the working directory with their default flags
RUN_FOLDERS = ['cartpole_dqn', 'cartpole_dqn_per', 'cartpole_ppo', 'pendulum_ppo', 'atari_dqn_PongNoFrameskip-v4',
               'atari_ppo_PongNoFrameskip-v4', 'mujoco_sac_HalfCheetah-v5', 'mujoco_ppo_InvertedPendulum-v5',
               'bitflip_dqn_her', 'point_sac_her', 'deepsea_dqn_rnd', 'videos']


def _ignored(name, patterns):
    return any(fnmatch.fnmatch(name + '/', p) or fnmatch.fnmatch(name, p) for p in patterns)


def test_gitignore_covers_every_examples_run_folder():
    with open(os.path.join(ROOT, '.gitignore')) as f:
        patterns = [line.strip() for line in f if line.strip() and not line.startswith('#')]
    missing = [name for name in RUN_FOLDERS if not _ignored(name, patterns)]
    assert missing == []
    assert 'MUJOCO_LOG.TXT' in patterns
    assert not _ignored('pipeline', patterns) and not _ignored('examples', patterns)


def test_mujoco_warnings_are_logged_not_written_to_the_working_directory(tmp_path, monkeypatch, caplog):
    pytest.importorskip('mujoco', reason="needs the mujoco extra: pip install -e '.[mujoco]'")
    import mujoco
    import numpy as np

    from pipeline.envs.env_manager import make_gym_env

    monkeypatch.chdir(tmp_path)
    env = make_gym_env('InvertedPendulum-v5')
    try:
        env.reset(seed=0)
        data = env.unwrapped.data
        data.qpos[:] = np.nan  # an unstable simulation: MuJoCo warns
        with caplog.at_level(logging.WARNING, logger='mujoco'):
            mujoco.mj_step(env.unwrapped.model, data)
    finally:
        env.close()
    assert not (tmp_path / 'MUJOCO_LOG.TXT').exists()
    assert any('Nan, Inf or huge value' in r.getMessage() for r in caplog.records)


def test_a_launched_nodes_run_folder_line_has_its_node_tag_before_its_task_starts(tmp_path, monkeypatch, capsys):
    """The first ``run folder:`` lines of ``rlpipe run`` (printed before the pipeline starts) lacked the tag."""
    import json

    from pipeline.run import RunInfo

    monkeypatch.setenv('RLPIPE_NODE', json.dumps({'node_id': 2, 'roles': ['collector']}))
    (tmp_path / 'run').mkdir()
    run = RunInfo(str(tmp_path / 'run'), {})
    run.begin({'seed': 0})
    assert capsys.readouterr().out == f'[node 2 collector] run folder: {tmp_path / "run"}\n'
    monkeypatch.delenv('RLPIPE_NODE')
    run.begin({'seed': 0})
    assert capsys.readouterr().out == f'run folder: {tmp_path / "run"}\n'


def test_under_ray_the_end_of_run_lines_are_kept_for_the_launcher(monkeypatch, capsys):
    from pipeline.runtime.node import RAY_NODE_ENV
    from pipeline.run.console import node_print, take_summary
    from pipeline.run.ray_launch import NodeActor

    monkeypatch.setenv(RAY_NODE_ENV, '1')
    node_print('run folder: x', summary=False)  # the start of a run: printed at once
    node_print('solved: ...', '  watch it: python y.py --play z --render')
    assert capsys.readouterr().out == 'run folder: x\n'
    assert NodeActor.summary(None) == ['solved: ...', '  watch it: python y.py --play z --render']
    assert take_summary() == []
