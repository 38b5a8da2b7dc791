"""A resumed run continues the run it resumes (issue 48): its folder, its TensorBoard curves (from the env step it
resumed at), its best checkpoint; the end-of-run summary never prints ``None``. A checkpoint from outside any
run folder starts a new run folder, and the run says so."""
import importlib.util
import json
import os
import shutil

import pytest

from pipeline.run.folders import run_folder_of

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SMALL = ['--set', 'policy.learn.learning_starts=64', '--set', 'policy.learn.batch_size=16', '--no-progress']


def example():
    spec = importlib.util.spec_from_file_location('dqn_cartpole_resume_test',
                                                  os.path.join(ROOT, 'examples', 'dqn_cartpole.py'))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def scalar_steps(events_file):
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
    steps = []
    for ev in EventFileLoader(str(events_file)).Load():
        if ev.HasField('summary') and ev.summary.value:
            steps.append(ev.step)
    return steps


def test_run_folder_of_a_checkpoint(tmp_path):
    run = tmp_path / 'exp' / '3'
    (run / 'ckpt').mkdir(parents=True)
    (run / 'ckpt' / 'final.pth.tar').write_bytes(b'x')
    assert run_folder_of(str(run / 'ckpt' / 'final.pth.tar')) is None  # no config.json: not a run folder
    (run / 'config.json').write_text('{}')
    assert run_folder_of(str(run / 'ckpt' / 'final.pth.tar')) == str(run)
    (tmp_path / 'agent.pth.tar').write_bytes(b'x')
    assert run_folder_of(str(tmp_path / 'agent.pth.tar')) is None


def test_a_resumed_run_continues_its_folder_log_and_best_checkpoint(tmp_path, monkeypatch, capsys):
    import torch

    monkeypatch.chdir(tmp_path)
    mod = example()
    mod.main(['--max-env-step', '400', *SMALL])
    run1 = tmp_path / 'cartpole_dqn' / '1'
    best = run1 / 'ckpt' / 'eval.pth.tar'
    final = run1 / 'ckpt' / 'final.pth.tar'
    best_before = torch.load(best, weights_only=True)['extra']
    capsys.readouterr()
    first_log = set(os.listdir(run1 / 'log'))

    mod.main(['--max-env-step', '800', '--resume', str(final), *SMALL])
    out = capsys.readouterr().out
    assert not (tmp_path / 'cartpole_dqn' / '2').exists()  # no new run folder
    assert f'run folder: {run1} (continued from ckpt/final.pth.tar)' in out
    assert 'None' not in out
    assert f'best evaluated policy: {best}' in out  # the run's best evaluation is still there
    assert torch.load(best, weights_only=True)['extra']['eval_value'] == best_before['eval_value']
    assert torch.load(final, weights_only=True)['counters']['env_step'] == 800
    # TensorBoard: a second events file in the same log folder, whose steps continue after env step 400
    new = [f for f in os.listdir(run1 / 'log') if f not in first_log]
    assert len(new) == 1 and new[0].startswith('events.out.tfevents')
    steps = scalar_steps(run1 / 'log' / new[0])
    assert steps and min(steps) > 400 and max(steps) <= 800
    doc = json.loads((run1 / 'config.json').read_text())
    assert doc['resumed_from'] is None and [r['resumed_from'] for r in doc['resumes']] == [str(final)]


def test_a_checkpoint_from_elsewhere_starts_a_new_run_folder_and_says_so(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    mod = example()
    mod.main(['--max-env-step', '400', *SMALL])
    agent_file = tmp_path / 'my_agent.pth.tar'  # e.g. a file an agent saved: in no run folder
    shutil.copy(tmp_path / 'cartpole_dqn' / '1' / 'ckpt' / 'final.pth.tar', agent_file)
    capsys.readouterr()
    mod.main(['--max-env-step', '600', '--resume', str(agent_file), *SMALL])
    out = capsys.readouterr().out
    run2 = tmp_path / 'cartpole_dqn' / '2'
    assert f'run folder: {run2} (new: {agent_file} is not in a run folder' in out
    assert 'None' not in out
    # no evaluation ran in this short resumed run: said plainly, and "watch it" plays the final checkpoint
    assert 'best evaluated policy: none yet (no evaluation in this run folder so far)' in out
    assert f'--play {run2 / "ckpt" / "final.pth.tar"}' in out


def test_the_saver_keeps_the_best_evaluation_of_its_own_folder_only(tmp_path):
    from contexts import OnlineRLContext
    from middleware import CkptSaver
    from pipeline import task
    from pipeline.config import compile_config
    from pipeline.policy import DQNPolicy

    def policy():
        cfg = compile_config({'policy': {'model': {'obs_shape': 4, 'action_shape': 2}}})
        return DQNPolicy(cfg, seed=0)

    saver = CkptSaver(policy(), str(tmp_path / 'run'))
    with task.start(ctx=OnlineRLContext()):
        ctx = task.ctx
        ctx.train_iter, ctx.eval_value = 10, 480.0
        g = saver(ctx)
        next(g)
        task.finish = True
        list(g)
    final = saver.paths['final.pth.tar']
    assert CkptSaver(policy(), str(tmp_path / 'run'), resume_from=final).best_eval == 480.0
    elsewhere = CkptSaver(policy(), str(tmp_path / 'other'), resume_from=final)
    assert elsewhere.best_eval == float('-inf')  # its own eval.pth.tar holds the best of its run


@pytest.mark.parametrize('files', [(), ('final.pth.tar',), ('eval.pth.tar', 'final.pth.tar')])
def test_the_summary_never_prints_none(tmp_path, capsys, files):
    from pipeline.run.prepare import RunInfo

    class Saver:
        dir = str(tmp_path / 'ckpt')
        paths = {}

    os.makedirs(Saver.dir)
    for f in files:
        (tmp_path / 'ckpt' / f).write_bytes(b'x')
    RunInfo(str(tmp_path), {}).print_paths(Saver(), os.path.join(ROOT, 'examples', 'dqn_cartpole.py'))
    out = capsys.readouterr().out
    assert 'None' not in out and 'best evaluated policy: ' in out
    if 'eval.pth.tar' not in files:
        assert 'none yet' in out
