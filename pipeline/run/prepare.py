"""A prepared run: what the shared flags (:mod:`pipeline.run.flags`) do before anything is built.

:func:`prepare_run` applies ``--set``, checks ``--resume`` / ``--play`` and ``--middleware``, and on a node the
launcher restarted picks the checkpoint to resume from; the :class:`RunInfo` it returns makes the run folder
(:mod:`pipeline.run.folders`), saves the resolved config there and prints where the outputs are.
:func:`resume_command` is the command that continues a run. Imports neither torch nor gymnasium.
"""
from __future__ import annotations

import argparse
import atexit
import copy
import datetime
import importlib
import json
import logging
import os
import shlex
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

from ..checkpoint import checkpoint_problem, to_plain
from ..config import apply_overrides as config_overrides
from ..runtime import Role, task
from ..runtime.node import RESTARTS_ENV
from .console import node_print
from .flags import device_overrides
from .folders import check_checkpoint_path, mark_launch, new_run_dir, run_folder_of
from .precheck import list_config, precheck_config, usage_error
from .resume import restart_resume

__all__ = ['prepare_run', 'RunInfo', 'apply_overrides', 'load_middleware_factory', 'resume_command']


def apply_overrides(user: Mapping[str, object], items: Sequence[str]) -> Dict[str, object]:
    """A copy of ``user`` with the ``--set KEY=VALUE`` items applied (``pipeline.config.apply_overrides``:
    values are Python literals when they parse as one; the config check reports unknown keys)."""
    return config_overrides(user, items)


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


def load_middleware_factory(spec: str) -> Callable[..., object]:
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
    middleware_factories: List[Callable[..., object]] = field(default_factory=list)

    exp_name: str = 'exp'
    argv: Optional[List[str]] = None  # the arguments parsed (None: sys.argv[1:])
    script: Optional[str] = None  # the example's file (None: sys.argv[0])

    def create_dir(self) -> str:
        """Create the run folder ``./<exp-name>/<n>/`` (once) and return it."""
        if self.dir is None:
            if getattr(task, 'instead_of_run', None) is not None:  # `rlpipe describe`: no step will run
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

    def save_config(self, cfg: Mapping[str, object], argv: Optional[Sequence[str]] = None) -> str:
        """Write the resolved config (and the command line) to ``<run dir>/config.json``. A resumed run that
        continues its run folder keeps the run's first record there and appends its own to ``resumes``."""
        self.create_dir()
        assert self.dir is not None
        path = os.path.join(self.dir, 'config.json')
        if argv is None:
            argv = self.argv if self.argv is not None else sys.argv[1:]
        doc = {'command': shlex.join([self.script or sys.argv[0], *argv]),
               'started': datetime.datetime.now().isoformat(timespec='seconds'),
               'resumed_from': self.resume, 'config': to_plain(cfg)}
        if self.continues():
            try:
                with open(path) as f:
                    first = json.load(f)
                if isinstance(first, dict):
                    doc = {**first, 'resumes': [*first.get('resumes', []), doc]}
            except (OSError, ValueError):  # unreadable: this run's record replaces it
                pass
        with open(path, 'w') as f:
            json.dump(doc, f, indent=2)
        return path

    def continues(self) -> bool:
        """True when this run resumes a checkpoint of the run folder it writes to (it continues that run)."""
        return bool(self.resume and self.dir and run_folder_of(self.resume) == os.path.abspath(self.dir))

    def begin(self, cfg: Mapping[str, object], quiet: bool = False) -> str:
        """Create the run folder, save the resolved config there and print its path (with the node's tag in a
        multi-node run, :func:`node_print`); returns it."""
        self.save_config(cfg)
        if not quiet:
            note = ''
            if self.resume and self.continues():
                note = f' (continued from {os.path.relpath(self.resume, self.dir)})'
            elif self.resume:
                note = f' (new: {self.resume} is not in a run folder\'s ckpt/, so this run does not continue one)'
            node_print(f'run folder: {self.dir}{note}', summary=False)
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
        node_print(f'run folder: {self.dir}')
        if task.roles and Role.LEARNER not in task.roles:
            return
        found = {}
        for name in ('eval.pth.tar', 'final.pth.tar'):
            path = ckpt.paths.get(name) or os.path.join(ckpt.dir, name)
            found[name] = path if os.path.isfile(path) else None
        best, final = found['eval.pth.tar'], found['final.pth.tar']
        lines = [f'  best evaluated policy: {best}' if best else
                 '  best evaluated policy: none yet (no evaluation in this run folder so far)',
                 f'  final (for --resume):  {final}' if final else '  final (for --resume):  not written',
                 f'  logs: tensorboard --logdir {os.path.join(str(self.dir), "log")}']
        watch = best or final
        if watch:
            rel = os.path.relpath(script)
            cmd = shlex.quote(rel if not rel.startswith("..") else os.path.abspath(script))
            lines.append(f'  watch it: python {cmd} --play {shlex.quote(watch)} --render')
        node_print(*lines)

    def extra_middleware(self, cfg: Mapping[str, object]) -> List[object]:
        """Build the ``--middleware`` factories with the resolved config."""
        return [f(cfg) for f in self.middleware_factories]


def prepare_run(args: argparse.Namespace, user_config: Mapping[str, object], policy: Optional[str] = None,
                env_check: bool = False) -> RunInfo:
    """Apply ``--set``, check ``--resume``/``--play`` paths and ``--middleware`` specs. Bad input ends
    with a one-line error. With ``policy`` (``'dqn'``, ``'ppo'``, ``'sac'``) the config is checked against
    that policy's schema, and with ``env_check`` its ``env.env_id`` against gymnasium's registry, before
    torch is imported: a problem ends the run with exit status 2 (:mod:`pipeline.run.precheck`). The run folder is made by ``RunInfo.create_dir`` / ``save_config`` (call
    them once the config has compiled, so a config error leaves no empty folder). ``--resume`` with a checkpoint
    of a run folder (``<exp>/<n>/ckpt/*.pth.tar``) continues that run in its folder (``RunInfo.dir`` is it);
    a checkpoint from anywhere else starts a new run folder.

    On a learner node that the launcher restarted (``rlpipe run --auto-recover`` or ``--backend ray
    --max-restarts N``; see :func:`restart_resume`) the run continues the launch's run folder and resumes from its newest learner
    checkpoint (weights, optimizer, counters, and the replay buffer when one was saved next to it), as if
    ``--resume`` named it; with no checkpoint written yet it starts as the first incarnation did."""
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
    if policy is not None and getattr(args, 'list_config', False):
        list_config(user, policy)  # --list-config: every key with this run's default, then exit 0
    if policy is not None and not args.play:
        precheck_config(user, policy, env_check)
    if args.resume and args.play:
        raise SystemExit('error: give --resume (continue training) or --play (run a saved policy), not both')
    if (args.render or args.video) and not args.play:
        raise SystemExit('error: --render and --video go with --play CKPT')
    resume = check_checkpoint_path(args.resume) if args.resume else None
    play = check_checkpoint_path(args.play) if args.play else None
    for flag, path in (('--resume', resume), ('--play', play)):
        problem = checkpoint_problem(path, with_buffer=flag == '--resume') if path else None
        if problem:  # e.g. a truncated checkpoint or final.buffer: refused before a run folder is made
            usage_error(f'error: {flag} {getattr(args, flag[2:])}: {problem}')
    factories = [load_middleware_factory(s) for s in args.middleware]
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
    elif resume is not None and not play:
        # a resumed run continues the run folder of its checkpoint (<exp>/<n>/ckpt/x.pth.tar -> <exp>/<n>): its
        # checkpoints, its best evaluation, its TensorBoard log; a checkpoint from elsewhere: a new run folder
        run_dir = run_folder_of(resume)
        if run_dir is not None:
            mark_launch(run_dir)  # under `rlpipe run`, a restarted node finds this folder
    global _parsed
    argv, script = getattr(args, '_argv', None), getattr(args, '_script', None)
    _parsed = (list(argv), script) if argv is not None else None
    return RunInfo(run_dir, user, resume, play, factories, exp_name=args.exp_name, argv=argv, script=script)
