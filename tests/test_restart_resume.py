"""A node that the launcher restarted (RLPIPE_RESTARTS >= 1) resumes the launch's run from its newest learner
checkpoint through ``prepare_run`` (what every training example calls); other nodes and first starts do not."""
import argparse
import json
import os
import time

from pipeline.experiment import new_run_dir, prepare_run
from pipeline.resume import latest_checkpoint


def _args(**kw):
    base = dict(exp_name='exp', seed=0, set=[], resume=None, play=None, render=False, video=None, middleware=[])
    return argparse.Namespace(**{**base, **kw})


def _touch(path, age):
    with open(path, 'wb') as f:
        f.write(b'x')
    t = time.time() - age
    os.utime(path, (t, t))


def test_latest_checkpoint_is_the_newest_learner_file_never_the_evaluators(tmp_path):
    assert latest_checkpoint(str(tmp_path / 'missing')) is None
    _touch(tmp_path / 'iteration_1000.pth.tar', 30)
    _touch(tmp_path / 'iteration_2000.pth.tar', 20)
    _touch(tmp_path / 'eval.pth.tar', 0)
    _touch(tmp_path / 'iteration_x.pth.tar', 0)
    assert latest_checkpoint(str(tmp_path)) == str(tmp_path / 'iteration_2000.pth.tar')
    _touch(tmp_path / 'final.pth.tar', 10)
    assert latest_checkpoint(str(tmp_path)) == str(tmp_path / 'final.pth.tar')


def test_a_restarted_learner_resumes_the_shared_run_other_nodes_and_first_starts_do_not(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv('RLPIPE_LAUNCH_ID', 'launch-1')
    run_dir = new_run_dir('exp')  # what the first incarnation made
    os.makedirs(os.path.join(run_dir, 'ckpt'))
    _touch(os.path.join(run_dir, 'ckpt', 'iteration_1000.pth.tar'), 5)
    node = {'node_id': 0, 'address': 'tcp://127.0.0.1:1', 'peers': {}, 'roles': ['learner']}
    monkeypatch.setenv('RLPIPE_NODE', json.dumps(node))
    monkeypatch.setenv('RLPIPE_RESTARTS', '0')
    first = prepare_run(_args(), {})
    assert first.resume is None and first.dir is None  # a first start makes its folder later, as before
    monkeypatch.setenv('RLPIPE_RESTARTS', '1')
    again = prepare_run(_args(), {})
    assert again.dir == run_dir and again.resume == os.path.join(run_dir, 'ckpt', 'iteration_1000.pth.tar')
    monkeypatch.setenv('RLPIPE_NODE', json.dumps({**node, 'roles': ['collector']}))
    assert prepare_run(_args(), {}).resume is None  # only a learner resumes
    monkeypatch.delenv('RLPIPE_LAUNCH_ID')
    monkeypatch.setenv('RLPIPE_NODE', json.dumps(node))
    assert prepare_run(_args(), {}).resume is None  # no launch: nothing to continue
