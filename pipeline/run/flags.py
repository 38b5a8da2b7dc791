"""The command-line flags every training example shares, and ``--device`` for any script.

Importing this module loads neither torch nor gymnasium, so ``--help`` answers at once::

    from pipeline.run import example_parser, prepare_run

    parser = example_parser(__doc__, exp_name='cartpole_dqn', max_env_step=300_000)
    args = parser.parse_args(argv)                 # --exp-name --seed --set --resume --play ...
    run = prepare_run(args, user_config)           # applies --set, makes <exp>/<n>/, checks --resume
    ...                                            # build envs, policy, pipeline; save under run.dir

Flags (all training examples): ``--exp-name NAME`` (runs go to ``./NAME/<n>/``, ``n`` = 1, 2, ...),
``--seed``, ``--set key=value`` (repeatable config overrides), ``--list-config`` (print every key with its
default and what is allowed, then exit), ``--resume CKPT`` (continue a run from
a checkpoint), ``--play CKPT`` (run the saved policy, with ``--render`` or ``--video DIR``,
``--episodes N``, ``--max-params N``: the most parameters the file's config may build), ``--max-env-step``, ``--threads`` (torch threads), ``--middleware module:factory``
(repeatable: ``factory(cfg)`` returns a middleware appended to the pipeline), ``--no-progress``,
``--device`` (where the policy trains: ``auto``, ``cpu``, ``cuda``, ``cuda:N``; the config's
``policy.device``) and ``--acting-device`` (where a collector or evaluator node of a multi-node run acts;
default the CPU). Scripts with a parser of their own add the device flag with :func:`add_device_flags`.
What the flags do to a run: :mod:`pipeline.run.prepare`.
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from ..checkpoint import MAX_LOADED_PARAMS
from ..config import parse_override
from ..device import DEVICE_CHOICES, device_problem
from .precheck import usage_error

__all__ = ['example_parser', 'add_device_flags', 'device_overrides', 'device_argv']


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

    # one signature for argparse's three overloads (the namespace given, or a new Namespace)
    def parse_known_args(self, args: Optional[Sequence[str]] = None,  # type: ignore[override]
                         namespace: Optional[argparse.Namespace] = None) -> Tuple[argparse.Namespace, List[str]]:
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
    the start with one line and exit status 2 (:func:`pipeline.run.precheck.usage_error`)."""
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

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: object,
                 option_string: Optional[str] = None) -> None:
        problem = device_problem(values, option_string or self.dest)
        if problem is not None:
            usage_error(f'error: {problem}')
        setattr(namespace, self.dest, str(values).strip().lower())


def add_device_flags(parser: Any, acting: bool = False) -> object:
    """Add ``--device`` (default None: the config's ``policy.device``, ``auto``) to ``parser`` (a parser or an
    argument group) and, with ``acting``, ``--acting-device`` (where a node of a multi-node run that does not
    learn acts; default the CPU). The one definition every example and benchmark uses; a bad value (e.g.
    ``--device cuda`` without a GPU) ends the run with one line. Returns ``parser``."""
    parser.add_argument('--device', default=None, action=_DeviceAction, metavar='DEVICE',
                        help=f'where the policy trains and acts: {DEVICE_CHOICES} (default: auto, the GPU when '
                             f'torch sees one, else the CPU)')
    if acting:
        parser.add_argument('--acting-device', default=None, action=_DeviceAction, metavar='DEVICE',
                            help='where a collector or evaluator node of a multi-node run acts (default cpu); '
                                 'a node that learns acts on --device')
    return parser


def device_overrides(args: argparse.Namespace) -> Dict[str, object]:
    """The ``policy`` config entries that ``--device`` / ``--acting-device`` set (only those given)."""
    out: Dict[str, object] = {}
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


def _positive_int(text: str) -> int:
    """argparse type: an int >= 1."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f'expected a positive int, got {text!r}')
    return value


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
                   help='override a config entry, e.g. --set policy.learn.learning_rate=1e-3 (repeatable; '
                        '--list-config shows every KEY)')
    g.add_argument('--list-config', action='store_true',
                   help="print every config KEY of this example with its default (the example's settings, "
                        "after any --set) and what is allowed, then exit")
    g.add_argument('--resume', default=None, metavar='CKPT',
                   help='continue training from a checkpoint (counters, weights, optimizer; the replay '
                        'buffer too when it was saved)')
    g.add_argument('--play', default=None, metavar='CKPT', help='run the policy saved in CKPT and print returns')
    g.add_argument('--episodes', type=int, default=5, help='episodes for --play (default 5)')
    g.add_argument('--render', action='store_true', help='with --play: show the env in a window')
    g.add_argument('--video', default=None, metavar='DIR', help='with --play: record videos into DIR')
    g.add_argument('--max-params', type=_positive_int, default=MAX_LOADED_PARAMS, metavar='N',
                   help=f'with --play: the most parameters the networks of the file\'s saved config may have '
                        f'(default {MAX_LOADED_PARAMS:,}; a file is data: raise it only for a file you trust)')
    g.add_argument('--max-env-step', type=int, default=max_env_step,
                   help=f'stop after this many env steps (default {max_env_step})')
    g.add_argument('--threads', type=int, default=1, help='torch threads (1 is fastest for small nets)')
    g.add_argument('--middleware', action='append', default=[], metavar='MODULE:FACTORY',
                   help='append FACTORY(cfg) from MODULE to the pipeline (repeatable), e.g. mypkg.hooks:printer')
    g.add_argument('--no-progress', action='store_true', help='no progress bar (log lines only)')
    add_device_flags(g, acting=True)
    return p
