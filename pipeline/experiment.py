"""What every training example shares: its command-line flags, its run folder, extra middleware,
the one-line Ctrl-C and the ``--resume`` command to continue.

Importing this module loads neither torch nor gymnasium, so ``--help`` answers at once::

    from pipeline.experiment import example_parser, prepare_run

    parser = example_parser(__doc__, exp_name='cartpole_dqn', max_env_step=300_000)
    args = parser.parse_args(argv)                 # --exp-name --seed --set --resume --play ...
    run = prepare_run(args, user_config)           # applies --set, makes <exp>/<n>/, checks --resume
    ...                                            # build envs, policy, pipeline; save under run.dir

Flags (all training examples): ``--exp-name NAME`` (runs go to ``./NAME/<n>/``, ``n`` = 1, 2, ...),
``--seed``, ``--set key=value`` (repeatable config overrides), ``--resume CKPT`` (continue a run from
a checkpoint), ``--play CKPT`` (run the saved policy, with ``--render`` or ``--video DIR``,
``--episodes N``), ``--max-env-step``, ``--threads`` (torch threads), ``--middleware module:factory``
(repeatable: ``factory(cfg)`` returns a middleware appended to the pipeline), ``--no-progress``,
``--device`` (where the policy trains: ``auto``, ``cpu``, ``cuda``, ``cuda:N``; the config's
``policy.device``) and ``--acting-device`` (where a collector or evaluator node of a multi-node run acts;
default the CPU). Scripts with a parser of their own add the device flag with :func:`add_device_flags`.
"""
from __future__ import annotations

import argparse
import datetime
import importlib
import json
import logging
import os
import shlex
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

from .console import node_print, setup_logging
from .play import play_policy, play_without_rendering

__all__ = ['example_parser', 'add_device_flags', 'device_overrides', 'device_argv', 'prepare_run', 'RunInfo',
           'apply_overrides', 'new_run_dir', 'load_middleware_factory', 'resume_command', 'check_checkpoint_path', 'to_plain', 'setup_logging',
           'play_policy', 'play_without_rendering', 'run_pipeline', 'run_script', 'node_print']


class ExampleParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` that remembers what it parsed: the namespace gets ``_argv`` (the arguments
    actually parsed, ``main(argv)``'s list or ``sys.argv[1:]``) and ``_script`` (the example's file), which
    :func:`prepare_run` keeps for ``config.json`` and the ``--resume`` command printed on Ctrl-C."""

    script: Optional[str] = None
    #: the seed when neither ``--seed`` nor ``--set seed=N`` gives one (``--seed`` parses to None when absent)
    seed_default: Optional[int] = None

    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        #: called with the parsed namespace, in order (e.g. ``add_env_flags``' per-env run folder name)
        self.after_parse: List[Callable[[argparse.Namespace], None]] = []

    def parse_known_args(self, args: Optional[Sequence[str]] = None, namespace: Any = None) -> Any:
        ns, rest = super().parse_known_args(args, namespace)
        ns._argv = list(sys.argv[1:] if args is None else args)
        ns._script = self.script or sys.argv[0]
        if self.seed_default is not None and hasattr(ns, 'seed'):
            ns.seed = resolve_seed(ns.seed, getattr(ns, 'set', None) or (), self.seed_default)
        for fn in self.after_parse:
            fn(ns)
        return ns, rest


def resolve_seed(flag: Optional[int], overrides: Sequence[str], default: int) -> int:
    """The run's one seed: ``--seed`` (``flag``, None when not given) or the last ``--set seed=N`` of
    ``overrides``, else ``default``. Both given with different values, or a seed that is not an int >= 0, end
    the start with one line and exit status 2 (:func:`pipeline.precheck.usage_error`)."""
    from pipeline.config import parse_override  # light: no torch
    from pipeline.precheck import usage_error

    set_seed: Any = None
    for item in overrides:
        try:
            key, value = parse_override(item)
        except ValueError:
            continue  # prepare_run reports it
        if key == 'seed':
            set_seed = (item.partition('=')[2].strip(), value)
    seed = flag
    if set_seed is not None:
        text, value = set_seed
        if flag is not None and value != flag:
            usage_error(f'error: --seed {flag} and --set seed={text} disagree: give the seed once')
        seed = value
    if seed is None:
        seed = default
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        usage_error(f'error: the seed must be an int >= 0, got {seed!r}')
    return seed


class _DeviceAction(argparse.Action):
    """``--device VALUE``: checked as it is parsed (the spelling, and whether this machine has the CUDA device
    it names; torch is imported only for a ``cuda`` value); a bad one ends the run with one line and exit
    status 2."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: Optional[str] = None) -> None:
        from .device import device_problem

        problem = device_problem(values, option_string or self.dest)
        if problem is not None:
            from .precheck import usage_error

            usage_error(f'error: {problem}')
        setattr(namespace, self.dest, str(values).strip().lower())


def add_device_flags(parser: Any, acting: bool = False) -> Any:
    """Add ``--device`` (default None: the config's ``policy.device``, ``auto``) to ``parser`` (a parser or an
    argument group) and, with ``acting``, ``--acting-device`` (where a node of a multi-node run that does not
    learn acts; default the CPU). The one definition every example and benchmark uses; a bad value (e.g.
    ``--device cuda`` without a GPU) ends the run with one line. Returns ``parser``."""
    from .device import DEVICE_CHOICES

    parser.add_argument('--device', default=None, action=_DeviceAction, metavar='DEVICE',
                        help=f'where the policy trains and acts: {DEVICE_CHOICES} (default: auto, the GPU when '
                             f'torch sees one, else the CPU)')
    if acting:
        parser.add_argument('--acting-device', default=None, action=_DeviceAction, metavar='DEVICE',
                            help='where a collector or evaluator node of a multi-node run acts (default cpu); '
                                 'a node that learns acts on --device')
    return parser


def device_overrides(args: argparse.Namespace) -> Dict[str, Any]:
    """The ``policy`` config entries that ``--device`` / ``--acting-device`` set (only those given)."""
    out: Dict[str, Any] = {}
    if getattr(args, 'device', None) is not None:
        out['device'] = args.device
    if getattr(args, 'acting_device', None) is not None:
        out['acting_device'] = args.acting_device
    return out


def device_argv(args: argparse.Namespace) -> List[str]:
    """``['--device', VALUE]`` when ``args.device`` was given, else ``[]``: to pass ``--device`` on to an
    example a benchmark runs."""
    device = getattr(args, 'device', None)
    return ['--device', device] if device is not None else []


def _caller_file(depth: int) -> Optional[str]:
    try:
        frame = sys._getframe(depth + 1)
    except ValueError:  # the stack is not that deep
        return None
    path = frame.f_globals.get('__file__')
    return os.path.abspath(path) if isinstance(path, str) and path.endswith('.py') else None


def example_parser(doc: Optional[str], exp_name: str, max_env_step: Optional[int] = None,
                   seed: int = 0) -> argparse.ArgumentParser:
    """An ``ArgumentParser`` with the flags every training example shares (see the module doc).
    Add the example's own flags to it before parsing. It records the arguments it parsed and the
    example's file (the module that called this function, or the one above it when that module is
    this package), so a run started as ``main([...])`` from Python records those, not ``sys.argv``."""
    p = ExampleParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    here = os.path.dirname(os.path.abspath(__file__))
    for depth in (1, 2):
        f = _caller_file(depth)
        if f is not None and os.path.dirname(f) != here:
            p.script = f
            break
    g = p.add_argument_group('common to all training examples')
    g.add_argument('--exp-name', default=exp_name,
                   help=f'experiment folder under the current directory; each run gets <exp>/<n>/ '
                        f'(default {exp_name})')
    p.seed_default = seed
    g.add_argument('--seed', type=int, default=None,
                   help=f'random seed, an int >= 0 (default {seed}; --set seed=N is the same setting)')
    g.add_argument('--set', action='append', default=[], metavar='KEY=VALUE',
                   help='override a config entry, e.g. --set policy.learn.learning_rate=1e-3 (repeatable)')
    g.add_argument('--resume', default=None, metavar='CKPT',
                   help='continue training from a checkpoint (counters, weights, optimizer; the replay '
                        'buffer too when it was saved)')
    g.add_argument('--play', default=None, metavar='CKPT', help='run the policy saved in CKPT and print returns')
    g.add_argument('--episodes', type=int, default=5, help='episodes for --play (default 5)')
    g.add_argument('--render', action='store_true', help='with --play: show the env in a window')
    g.add_argument('--video', default=None, metavar='DIR', help='with --play: record videos into DIR')
    g.add_argument('--max-env-step', type=int, default=max_env_step,
                   help=f'stop after this many env steps (default {max_env_step})')
    g.add_argument('--threads', type=int, default=1, help='torch threads (1 is fastest for small nets)')
    g.add_argument('--middleware', action='append', default=[], metavar='MODULE:FACTORY',
                   help='append FACTORY(cfg) from MODULE to the pipeline (repeatable), e.g. mypkg.hooks:printer')
    g.add_argument('--no-progress', action='store_true', help='no progress bar (log lines only)')
    add_device_flags(g, acting=True)
    return p


# --------------------------------------------------------------------------- config overrides
def apply_overrides(user: Mapping[str, Any], items: Sequence[str]) -> Dict[str, Any]:
    """A copy of ``user`` with the ``--set KEY=VALUE`` items applied (``pipeline.config.apply_overrides``:
    values are Python literals when they parse as one; the config check reports unknown keys)."""
    from pipeline.config import apply_overrides as apply  # light: no torch

    return apply(user, items)


def to_plain(obj: Any) -> Any:
    """Nested mappings/sequences of plain values (for JSON and for ``weights_only`` checkpoints)."""
    if isinstance(obj, Mapping):
        return {str(k): to_plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_plain(v) for v in obj]
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    return repr(obj)


# --------------------------------------------------------------------------- run folders
LAUNCH_ID_ENV = 'RLPIPE_LAUNCH_ID'  # set by `rlpipe run` for all nodes of one launch


def new_run_dir(exp_name: str, root: Optional[str] = None, launch_id: Optional[str] = None) -> str:
    """Create and return ``<root>/<exp_name>/<n>`` with ``n`` one more than the highest number there
    (1 for the first run). Safe when two runs start at once (``mkdir`` either wins or retries).

    The nodes of one ``rlpipe run`` launch (same ``launch_id``, default ``$RLPIPE_LAUNCH_ID``) on one
    machine share one folder: the first creates it and marks it, the others find the mark."""
    base = os.path.join(os.path.abspath(root or os.getcwd()), exp_name)
    os.makedirs(base, exist_ok=True)
    launch_id = launch_id if launch_id is not None else os.environ.get(LAUNCH_ID_ENV)
    if launch_id:
        import fcntl

        with open(os.path.join(base, '.lock'), 'a+') as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            for d in os.listdir(base):
                mark = os.path.join(base, d, '.launch_id')
                if d.isdigit() and os.path.isfile(mark):
                    with open(mark) as f:
                        if f.read().strip() == launch_id:
                            return os.path.join(base, d)
            path = _next_numbered_dir(base)
            with open(os.path.join(path, '.launch_id'), 'w') as f:
                f.write(launch_id)
            return path
    return _next_numbered_dir(base)


def _next_numbered_dir(base: str) -> str:
    while True:
        nums = [int(d) for d in os.listdir(base) if d.isdigit()]
        path = os.path.join(base, str(max(nums, default=0) + 1))
        try:
            os.mkdir(path)
            return path
        except FileExistsError:
            continue


def check_checkpoint_path(path: str) -> str:
    """Refuse a ``--resume``/``--play`` path that is missing, a directory or empty (before anything
    is built); returns the absolute path."""
    full = os.path.abspath(os.path.expanduser(path))
    if os.path.isdir(full):
        ckpts = sorted(os.path.join(r, f) for r, _, fs in os.walk(full) for f in fs if f.endswith('.pth.tar'))
        hint = f'; checkpoints below it: {", ".join(ckpts[:3])}' if ckpts else ''
        raise SystemExit(f'error: {path!r} is a directory; give a checkpoint file{hint}')
    if not os.path.exists(full):
        raise SystemExit(f'error: no checkpoint at {path!r} (checkpoints are in <exp>/<n>/ckpt/, e.g. final.pth.tar)')
    if os.path.getsize(full) == 0:
        raise SystemExit(f'error: {path!r} is empty: not a checkpoint')
    return full


#: (argv, script) of the run :func:`prepare_run` prepared last in this process (what ``main(argv)`` parsed)
_parsed: Optional[tuple] = None


def resume_command(ckpt_path: str, argv: Optional[Sequence[str]] = None, script: Optional[str] = None) -> str:
    """The exact command that continues this run from ``ckpt_path``: the same flags, with
    ``--resume`` replaced. Defaults: the arguments and script of the run :func:`prepare_run` prepared
    last in this process (``sys.argv`` when there is none)."""
    if argv is None:
        argv = _parsed[0] if _parsed is not None else sys.argv[1:]
    if script is None and _parsed is not None:
        script = _parsed[1]
    out: List[str] = []
    skip = False
    for a in argv:
        if skip:
            skip = False
            continue
        if a == '--resume':
            skip = True
            continue
        if a.startswith('--resume='):
            continue
        out.append(a)
    script = script or sys.argv[0]
    return shlex.join([sys.executable if os.path.basename(sys.executable).startswith('python') else 'python',
                       script, *out, '--resume', ckpt_path])


def load_middleware_factory(spec: str) -> Callable[..., Any]:
    """``'package.module:factory'`` -> the factory (a callable taking the config and returning a
    middleware). A clear ``SystemExit`` when the module or the name does not exist."""
    mod_name, sep, attr = spec.partition(':')
    if not sep or not mod_name or not attr:
        raise SystemExit(f'error: --middleware needs MODULE:FACTORY (e.g. mypkg.hooks:printer), got {spec!r}')
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        mod = importlib.import_module(mod_name)
    except ImportError as e:
        raise SystemExit(f'error: --middleware {spec}: cannot import {mod_name!r} ({e})') from None
    fn = getattr(mod, attr, None)
    if not callable(fn):
        raise SystemExit(f'error: --middleware {spec}: {mod_name!r} has no callable {attr!r}')
    return fn


@dataclass
class RunInfo:
    """A prepared run: ``dir`` (``<exp>/<n>``, absolute), the user config after ``--set``, the
    absolute ``resume`` / ``play`` paths, and the extra middleware factories."""

    dir: Optional[str]
    user_config: Dict[str, Any]
    resume: Optional[str] = None
    play: Optional[str] = None
    middleware_factories: List[Callable[..., Any]] = field(default_factory=list)

    exp_name: str = 'exp'
    argv: Optional[List[str]] = None  # the arguments parsed (None: sys.argv[1:])
    script: Optional[str] = None  # the example's file (None: sys.argv[0])

    def create_dir(self) -> str:
        """Create the run folder ``./<exp-name>/<n>/`` (once) and return it."""
        if self.dir is None:
            from pipeline import task
            if getattr(task, 'instead_of_run', None) is not None:  # `rlpipe describe`: no step will run
                import atexit
                import shutil
                import tempfile
                self.dir = tempfile.mkdtemp(prefix=f'{os.path.basename(self.exp_name)}-describe-')
                atexit.register(shutil.rmtree, self.dir, True)  # nothing of a describe-only run is kept
            else:
                self.dir = new_run_dir(self.exp_name)
        return self.dir

    def abandon(self) -> None:
        """Remove the run folder made by :meth:`create_dir` (and ``<exp-name>/`` if that leaves it empty) when
        nothing was written to it: a start refused after the folder was made leaves nothing behind."""
        if self.dir is None or not os.path.isdir(self.dir) or os.listdir(self.dir):
            return
        os.rmdir(self.dir)
        parent = os.path.dirname(self.dir)
        if not os.listdir(parent):
            os.rmdir(parent)
        self.dir = None

    def save_config(self, cfg: Mapping[str, Any], argv: Optional[Sequence[str]] = None) -> str:
        """Write the resolved config (and the command line) to ``<run dir>/config.json``."""
        self.create_dir()
        assert self.dir is not None
        path = os.path.join(self.dir, 'config.json')
        if argv is None:
            argv = self.argv if self.argv is not None else sys.argv[1:]
        doc = {'command': shlex.join([self.script or sys.argv[0], *argv]),
               'started': datetime.datetime.now().isoformat(timespec='seconds'),
               'resumed_from': self.resume, 'config': to_plain(cfg)}
        with open(path, 'w') as f:
            json.dump(doc, f, indent=2)
        return path

    def begin(self, cfg: Mapping[str, Any], quiet: bool = False) -> str:
        """Create the run folder, save the resolved config there and print its path (with the node's tag in a
        multi-node run, :func:`node_print`); returns it."""
        self.save_config(cfg)
        if not quiet:
            node_print(f'run folder: {self.dir}', summary=False)
        assert self.dir is not None
        return self.dir

    def print_outputs(self, ckpt: Any, quiet: bool = False) -> None:
        """Print (unless ``quiet``) the run folder and the final checkpoint a ``CkptSaver`` wrote."""
        if not quiet:
            print(f'run folder: {self.dir} (final checkpoint: {ckpt.paths.get("final.pth.tar")})')

    def print_paths(self, ckpt: Any, script: str) -> None:
        """Print where the run's outputs are: the run folder, the evaluated ("best") and the final
        checkpoint, the logs, and the command that plays the evaluated policy (``script``: the example's
        ``__file__``). In a multi-process run the nodes share the run folder: a checkpoint written by
        another node is found there, and only the node that trains (or the single process) prints the
        checkpoints; the others print the folder alone."""
        from pipeline import task
        from pipeline.roles import Role

        node_print(f'run folder: {self.dir}')
        if task.roles and Role.LEARNER not in task.roles:
            return
        found = {}
        for name in ('eval.pth.tar', 'final.pth.tar'):
            path = ckpt.paths.get(name) or os.path.join(ckpt.dir, name)
            found[name] = path if os.path.isfile(path) else None
        best, final = found['eval.pth.tar'], found['final.pth.tar']
        lines = [f'  best evaluated policy: {best}', f'  final (for --resume):  {final}',
                 f'  logs: tensorboard --logdir {os.path.join(str(self.dir), "log")}']
        if best:
            rel = os.path.relpath(script)
            cmd = shlex.quote(rel if not rel.startswith("..") else os.path.abspath(script))
            lines.append(f'  watch it: python {cmd} --play {shlex.quote(best)} --render')
        node_print(*lines)

    def extra_middleware(self, cfg: Mapping[str, Any]) -> List[Any]:
        """Build the ``--middleware`` factories with the resolved config."""
        return [f(cfg) for f in self.middleware_factories]


def prepare_run(args: argparse.Namespace, user_config: Mapping[str, Any], policy: Optional[str] = None,
                env_check: bool = False) -> RunInfo:
    """Apply ``--set``, check ``--resume``/``--play`` paths and ``--middleware`` specs. Bad input ends
    with a one-line error. With ``policy`` (``'dqn'``, ``'ppo'``, ``'sac'``) the config is checked against
    that policy's schema, and with ``env_check`` its ``env.env_id`` against gymnasium's registry, before
    torch is imported: a problem ends the run with exit status 2 (:mod:`pipeline.precheck`). The run folder is made by ``RunInfo.create_dir`` / ``save_config`` (call
    them once the config has compiled, so a config error leaves no empty folder).

    On a learner node that the launcher restarted (``rlpipe run --auto-recover`` or ``--backend ray
    --max-restarts N``; see :func:`restart_resume`) the run continues the launch's run folder and resumes from its newest learner
    checkpoint (weights, optimizer, counters, and the replay buffer when one was saved next to it), as if
    ``--resume`` named it; with no checkpoint written yet it starts as the first incarnation did."""
    import copy

    try:
        user = apply_overrides(copy.deepcopy(dict(user_config)), args.set)
    except ValueError as e:
        raise SystemExit(f'error: --set: {e}') from None
    user['exp_name'] = args.exp_name
    user['seed'] = args.seed  # --seed and --set seed=N resolved to one value when parsing (resolve_seed)
    devices = device_overrides(args)
    if devices:  # --device / --acting-device win over the config (and over --set policy.device=...)
        section = user.get('policy')
        user['policy'] = {**(section if isinstance(section, Mapping) else {}), **devices}
    if policy is not None and not args.play:
        from .precheck import precheck_config

        precheck_config(user, policy, env_check)
    if args.resume and args.play:
        raise SystemExit('error: give --resume (continue training) or --play (run a saved policy), not both')
    if (args.render or args.video) and not args.play:
        raise SystemExit('error: --render and --video go with --play CKPT')
    resume = check_checkpoint_path(args.resume) if args.resume else None
    play = check_checkpoint_path(args.play) if args.play else None
    from pipeline.resume import checkpoint_problem

    for flag, path in (('--resume', resume), ('--play', play)):
        problem = checkpoint_problem(path, with_buffer=flag == '--resume') if path else None
        if problem:  # e.g. a truncated checkpoint or final.buffer: refused before a run folder is made
            from .precheck import usage_error

            usage_error(f'error: {flag} {getattr(args, flag[2:])}: {problem}')
    factories = [load_middleware_factory(s) for s in args.middleware]
    from pipeline.resume import RESTARTS_ENV, restart_resume

    run_dir = None
    again = restart_resume(args.exp_name) if not play else None
    if again is not None:
        run_dir, last = again
        n = os.environ.get(RESTARTS_ENV)
        if last is not None:
            resume = last
            logging.getLogger(__name__).warning('restart %s of this node: resuming from %s', n, last)
        else:
            logging.getLogger(__name__).warning('restart %s of this node: no checkpoint in %s yet; starting %s', n,
                                                run_dir, f'from {resume}' if resume else 'afresh')
    global _parsed
    argv, script = getattr(args, '_argv', None), getattr(args, '_script', None)
    _parsed = (list(argv), script) if argv is not None else None
    return RunInfo(run_dir, user, resume, play, factories, exp_name=args.exp_name, argv=argv, script=script)


# --------------------------------------------------------------------------- running
def run_pipeline(ckpt: Any = None, max_step: Optional[int] = None) -> tuple:
    """``task.run(max_step)`` inside ``with task.start(...)``; returns ``(last ctx, interrupted)``.

    A learner (or a node without roles) with a ``CkptSaver`` always ends with ``final.pth.tar`` written, also
    when the finish came from another node between two steps. On Ctrl-C it prints one line instead of a
    traceback; on a learner with a ``CkptSaver`` it writes ``final.pth.tar`` (and the buffer, when the saver has one) and prints the
    exact command that resumes the run."""
    from pipeline import task

    try:
        if max_step is None:
            task.run()
        else:
            task.run(max_step)
        ctx = task.ctx
        # A finish from another node can arrive between two steps: the run then ends without a step whose
        # backward part saw it, and the saver wrote no final checkpoint. Write it here (once).
        if (ckpt is not None and getattr(ckpt, 'save_finish', False) and task.has_role('learner')
                and 'final.pth.tar' not in getattr(ckpt, 'paths', {'final.pth.tar': None})):
            ckpt.save_final(ctx)
        return ctx, False
    except KeyboardInterrupt:
        ctx = task.ctx
        where = f'env step {getattr(ctx, "env_step", "?")}, train iter {getattr(ctx, "train_iter", "?")}'
        if ckpt is not None and task.has_role('learner'):
            path = ckpt.save_final(ctx)
            if task.router is not None and task.router.is_active:  # a node of `rlpipe run`
                how = f'add --resume {shlex.quote(path)} to the same rlpipe run command'
            else:
                how = resume_command(path)
            print(f'\ninterrupted at {where}: saved {path}\nresume with: {how}', flush=True)
        else:
            print(f'\ninterrupted at {where}', flush=True)
        return ctx, True


def run_script(main: Callable[[], Any]) -> None:
    """A training script's ``if __name__ == '__main__':`` part: run ``main()`` and exit with its code (an
    int; 0 for anything else). A Ctrl-C that reaches here came before training started (``run_pipeline``
    handles it during training): one line instead of a traceback, exit code 130."""
    try:
        code = main()
    except KeyboardInterrupt:
        print('\ninterrupted before training started; nothing saved')
        sys.exit(130)
    sys.exit(code if isinstance(code, int) and not isinstance(code, bool) else 0)
