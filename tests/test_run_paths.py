"""What a finished run prints about its outputs (`RunInfo.print_paths`): checkpoints another node of a
multi-process run wrote into the shared run folder are found there, the play command is one a user can
paste, and nodes that do not train print only the folder."""
import os
import shlex
import types

from pipeline import task
from pipeline.run import RunInfo
from pipeline.runtime.roles import Role


def _ckpt(run_dir, written):
    ckpt_dir = os.path.join(run_dir, 'ckpt')
    os.makedirs(ckpt_dir, exist_ok=True)
    for name in ('eval.pth.tar', 'final.pth.tar'):
        if name in written:
            open(os.path.join(ckpt_dir, name), 'wb').write(b'x')
    # this node's saver wrote only final.pth.tar; eval.pth.tar came from the evaluator node
    paths = {'final.pth.tar': os.path.join(ckpt_dir, 'final.pth.tar')} if 'final.pth.tar' in written else {}
    return types.SimpleNamespace(dir=ckpt_dir, paths=paths)


def test_learner_node_finds_the_evaluators_checkpoint_and_prints_a_runnable_play_command(tmp_path, capsys,
                                                                                          monkeypatch):
    monkeypatch.chdir(tmp_path)
    script = tmp_path / 'examples' / 'ppo_cartpole.py'
    script.parent.mkdir()
    script.write_text('')
    run = RunInfo(str(tmp_path / 'cartpole_ppo' / '1'), {})
    ckpt = _ckpt(run.dir, {'eval.pth.tar', 'final.pth.tar'})
    with task.start(roles=[Role.LEARNER]):
        pass
    run.print_paths(ckpt, str(script))
    out = capsys.readouterr().out
    best = os.path.join(ckpt.dir, 'eval.pth.tar')
    assert f'best evaluated policy: {best}' in out
    assert f'final (for --resume):  {os.path.join(ckpt.dir, "final.pth.tar")}' in out
    play = [line for line in out.splitlines() if 'watch it:' in line]
    assert len(play) == 1
    cmd = shlex.split(play[0].split('watch it:', 1)[1])
    assert cmd[:2] == ['python', os.path.join('examples', 'ppo_cartpole.py')] and os.path.isfile(cmd[1])
    assert cmd[2:] == ['--play', best, '--render']


def test_missing_checkpoints_are_said_plainly_and_no_play_command(tmp_path, capsys):
    run = RunInfo(str(tmp_path / 'run'), {})
    ckpt = _ckpt(run.dir, set())
    with task.start():
        pass
    run.print_paths(ckpt, 'examples/dqn_cartpole.py')
    out = capsys.readouterr().out
    assert 'None' not in out  # issue 48: never "best evaluated policy: None"
    assert 'best evaluated policy: none yet (no evaluation in this run folder so far)' in out
    assert 'final (for --resume):  not written' in out
    assert 'watch it' not in out


def test_a_collector_node_prints_only_the_run_folder(tmp_path, capsys):
    run = RunInfo(str(tmp_path / 'run'), {})
    ckpt = _ckpt(run.dir, {'eval.pth.tar', 'final.pth.tar'})
    with task.start(roles=[Role.COLLECTOR]):
        pass
    run.print_paths(ckpt, 'examples/dqn_cartpole.py')
    out = capsys.readouterr().out
    assert out.strip() == f'run folder: {run.dir}'
