"""An example started from Python as ``main(argv)`` records that argv (and the example's file) in
config.json and in the ``--resume`` command printed on Ctrl-C, not the ``sys.argv`` of whatever ran it."""
import importlib.util
import json
import os
import re
import shlex
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, 'examples', 'dqn_cartpole.py')


def _load():
    spec = importlib.util.spec_from_file_location('dqn_cartpole_argv_test', SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_config_json_and_the_ctrl_c_resume_command_record_the_argv_main_parsed(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, 'argv', ['/somewhere/else/driver.py', '--driver-flag', 'x'])

    def interrupt(ctx):
        if ctx.train_iter >= 3:
            raise KeyboardInterrupt

    argv = ['--seed', '3', '--max-env-step', '100000', '--set', 'policy.learn.learning_starts=64',
            '--set', 'policy.learn.batch_size=16', '--no-progress', '--no-save-buffer']
    _load().main(argv, extra_middleware=[interrupt])
    run_dir = tmp_path / 'cartpole_dqn' / '1'
    command = json.loads((run_dir / 'config.json').read_text())['command']
    assert shlex.split(command) == [SCRIPT, *argv]
    out = capsys.readouterr().out
    resume = shlex.split(re.search(r'resume with: (.+)', out).group(1))
    final = str(run_dir / 'ckpt' / 'final.pth.tar')
    assert resume[1:] == [SCRIPT, *argv, '--resume', final]


def test_resume_command_defaults_to_the_last_prepared_run_and_replaces_resume(tmp_path):
    from pipeline.run import example_parser, prepare_run, resume_command

    ckpt = tmp_path / 'a.pth.tar'
    ckpt.write_bytes(b'x')
    args = example_parser(None, exp_name='exp').parse_args(['--seed', '5', '--resume', str(ckpt)])
    assert args._argv == ['--seed', '5', '--resume', str(ckpt)] and args._script == os.path.abspath(__file__)
    run = prepare_run(args, {})
    assert run.argv == args._argv
    assert shlex.split(resume_command('b.pth.tar'))[1:] == [os.path.abspath(__file__), '--seed', '5',
                                                            '--resume', 'b.pth.tar']
