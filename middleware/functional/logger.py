"""Online logging: TensorBoard scalars and a progress line. Never changes the context."""
from __future__ import annotations

import contextlib
import logging
import math
import os
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Mapping as MappingABC
from typing import TYPE_CHECKING, Callable, Deque, Dict, Iterator, List, Optional, Protocol, TextIO, TypedDict, cast

from tqdm import tqdm

from contexts import OnlineRLContext
from pipeline.runtime.node import node_is_quiet, node_label
from pipeline.runtime.roles import for_all_roles

if TYPE_CHECKING:
    from torch.utils.tensorboard import SummaryWriter

__all__ = ['online_logger', 'LoggerMiddleware', 'scalar_means', 'ProgressDisplay', 'UpdateRate', 'PROGRESS_TAGS', 'RETURN_WINDOW']

log = logging.getLogger(__name__)


def _scalar(v: object) -> Optional[float]:
    if isinstance(v, bool):
        return float(v)
    if isinstance(v, (int, float)):
        return float(v)
    numel = getattr(v, 'numel', None)
    if numel is not None and numel() == 1 and not isinstance(v, (str, bytes)):
        return float(getattr(v, 'item')())  # 0-d tensor / 1-element array
    return None


def scalar_means(train_output: object) -> Dict[str, float]:
    """Mean of every scalar entry of ``ctx.train_output`` (a list of
    :class:`~pipeline.data.records.TrainOutput`, or one of them); non-scalar entries (e.g. per-row
    ``priority``) are skipped, several modules' metrics become ``module/metric``. The input is not
    modified."""
    outs = train_output if isinstance(train_output, list) else [train_output]
    sums: Dict[str, float] = {}
    counts: Dict[str, int] = {}
    for o in outs:
        if not isinstance(o, MappingABC):
            continue
        for k, v in o.items():
            if isinstance(v, MappingABC):  # several modules: module/metric
                for k2, v2 in v.items():
                    s = _scalar(v2)
                    if s is not None:
                        key = f'{k}/{k2}'
                        sums[key] = sums.get(key, 0.0) + s
                        counts[key] = counts.get(key, 0) + 1
                continue
            s = _scalar(v)
            if s is not None:
                sums[k] = sums.get(k, 0.0) + s
                counts[k] = counts.get(k, 0) + 1
    return {k: sums[k] / counts[k] for k in sums}


def _fmt_time(sec: float) -> str:
    sec = int(max(sec, 0))
    return f'{sec // 3600}:{sec % 3600 // 60:02d}:{sec % 60:02d}' if sec >= 3600 else f'{sec // 60:02d}:{sec % 60:02d}'


# tqdm's default layout, with the remaining time named for what it is: the time to the step budget (a run that
# stops on an evaluation target ends long before it); and the layout ``close`` leaves when the run stopped early.
_BAR_RUNNING = '{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}, {remaining} to the step budget, {rate_fmt}{postfix}]'
_BAR_STOPPED = '{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}, {rate_fmt}{postfix}, stopped before the step budget]'


#: plain progress lines show a rate (and the time left) only once this many seconds have passed
MIN_RATE_SECONDS = 1.0

#: ``return`` on the progress line: the mean return of this many most recent training episodes
RETURN_WINDOW = 10

#: The numbers the progress line shows after its counters, by name; TensorBoard has each as ``progress/<name>``:
#: ``return`` (mean return of the last RETURN_WINDOW training episodes, exploration included), ``updates/s``
#: (train iterations per wall second over the last UpdateRate.window seconds), ``eval`` (mean return of the
#: last evaluation), ``loss`` (mean ``total_loss`` since the last TensorBoard write).
PROGRESS_TAGS = ('return', 'updates/s', 'eval', 'loss')


class UpdateRate:
    """Train iterations per wall second over the last ``window`` seconds (None until ``min_seconds`` have
    passed since the first sample): a rate that follows a run that speeds up or slows down, unlike the
    mean since the start."""

    def __init__(self, window: float = 10.0, min_seconds: float = MIN_RATE_SECONDS,
                 clock: Optional[Callable[[], float]] = None) -> None:
        self.window = window
        self.min_seconds = min_seconds
        self.clock = clock or (lambda: time.monotonic())  # looked up at each call: tests replace the clock
        self._samples: deque = deque()  # (time, train_iter), at least 0.1 s apart

    def update(self, train_iter: int) -> Optional[float]:
        """Record ``train_iter`` now; return the current rate (or None)."""
        now = self.clock()
        s = self._samples
        if not s or now - s[-1][0] >= 0.1:
            s.append((now, int(train_iter)))
        else:
            s[-1] = (s[-1][0], int(train_iter))  # within 0.1 s: the newest count at the last sample's time
        while len(s) > 2 and now - s[1][0] >= self.window:
            s.popleft()
        return self.rate(now)

    def rate(self, now: Optional[float] = None) -> Optional[float]:
        s = self._samples
        if not s:
            return None
        now = self.clock() if now is None else now
        dt = now - s[0][0]
        if dt < self.min_seconds:
            return None
        return max(0, s[-1][1] - s[0][1]) / dt


class ProgressDisplay:
    """A progress display of env steps: a tqdm bar on a terminal (rate, and, when ``total`` (the step
    budget) is known, the time left to it at this rate, labelled "to the step budget"), plain lines every
    ``interval`` seconds otherwise (also with rate and "ETA to the step budget"). The estimate is an upper
    bound for a run that may stop earlier on an evaluation target; when the display is closed before the
    budget is reached (such a stop, ``task.finish``, Ctrl-C), the bar is redrawn without it.

    Log lines written through :func:`pipeline.run.console.setup_logging` go through ``tqdm.write``,
    which lifts the bar, prints the line and redraws it, so they never garble each other.
    """

    def __init__(self, stream: TextIO, total: Optional[int] = None, label: str = '', interval: float = 2.0,
                 use_tqdm: Optional[bool] = None) -> None:
        self.stream = stream
        self.total = total
        self.label = label
        self.interval = interval
        tty = getattr(stream, 'isatty', lambda: False)()
        self._bar = None
        self._last_n = 0
        self._last_print = -math.inf
        self._t0 = time.monotonic()
        if use_tqdm is None:
            use_tqdm = tty and not label  # several nodes on one terminal: labelled lines, not bars
        if use_tqdm:
            try:
                self._bar = tqdm(total=total, unit=' env steps', unit_scale=True, desc=label or 'train',
                                 file=stream, dynamic_ncols=True, leave=True, mininterval=0.5,
                                 bar_format=_BAR_RUNNING if total else None)
            except ImportError:
                self._bar = None

    def update(self, n: int, info: str) -> None:
        """Show ``n`` env steps done and ``info`` (e.g. train iter, last eval, loss)."""
        if self._bar is not None:
            if n > self._last_n:
                self._bar.update(n - self._last_n)
                self._last_n = n
            self._bar.set_postfix_str(info, refresh=False)
            return
        now = time.monotonic()
        if now - self._last_print < self.interval:
            return
        self._last_print = now
        el = now - self._t0
        # a rate over the first instants of a run (one batch of env steps in a few ms) means nothing: none yet
        rate = n / el if el >= MIN_RATE_SECONDS else 0.0
        parts = [self.label] if self.label else []
        parts.append(f'env_step {n}' + (f'/{self.total} ({100.0 * n / self.total:.0f}%)' if self.total else ''))
        if rate > 0:
            parts.append(f'{rate:.0f} steps/s')
        parts.append(f'elapsed {_fmt_time(el)}')
        if self.total and rate > 0 and n < self.total:
            parts.append(f'ETA to the step budget {_fmt_time((self.total - n) / rate)}')
        if info:
            parts.append(info)
        self.stream.write(' | '.join(parts) + '\n')
        self.stream.flush()

    def close(self) -> None:
        if self._bar is not None:
            if self.total and self._last_n < self.total:   # stopped before the budget: no time left to show
                self._bar.bar_format = _BAR_STOPPED
            self._bar.close()
            self._bar = None


@contextlib.contextmanager
def _ctrl_c_held() -> Iterator[None]:
    """Hold a Ctrl-C (SIGINT) that arrives inside the block and raise its ``KeyboardInterrupt`` when the block ends;
    a second Ctrl-C inside the block raises at once (a block that hangs can still be stopped).

    Acts only on the main thread while Python's default SIGINT handler is installed; elsewhere (another
    thread, SIGINT ignored, a program's own handler) the block runs as is."""
    if (threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGINT) is not signal.default_int_handler):
        yield
        return
    held: List[int] = []

    def hold(signum: int, frame: object) -> None:
        if held:
            raise KeyboardInterrupt
        held.append(signum)

    signal.signal(signal.SIGINT, hold)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if held:
        raise KeyboardInterrupt


class _CtrlCSafeWriter:
    """The three :class:`SummaryWriter` calls the logger makes, each run under :func:`_ctrl_c_held`.

    A ``KeyboardInterrupt`` raised inside TensorBoard's queue code (``add_scalar`` puts an event on a
    queue its writer thread drains) leaves the queue's task count wrong: the writer thread then fails
    with "task_done() called too many times", or ``close`` waits forever. Holding Ctrl-C until each call
    returns keeps the queue whole; the interrupt is raised right after."""

    def __init__(self, writer: SummaryWriter) -> None:
        self._writer = writer

    def add_scalar(self, tag: str, value: float, step: int) -> None:
        with _ctrl_c_held():
            self._writer.add_scalar(tag, value, step)

    def flush(self) -> None:
        with _ctrl_c_held():
            self._writer.flush()

    def close(self) -> None:
        with _ctrl_c_held():
            self._writer.close()


class _LoggerState(TypedDict):
    """What :func:`online_logger`'s middleware keeps between calls."""

    writer: Optional[_CtrlCSafeWriter]
    tb_failed: bool
    last_train_write: Optional[int]
    acc: Dict[str, float]          # train scalar -> sum since the last write
    acc_n: Dict[str, int]          # train scalar -> count since the last write
    last_print: float
    last_loss: Optional[float]
    last_eval: Optional[float]
    t0: Optional[float]
    display: Optional[ProgressDisplay]
    returns: Deque[float]          # the last RETURN_WINDOW collect episode returns
    rate: UpdateRate
    ups: Optional[float]


class LoggerMiddleware(Protocol):
    """What :func:`online_logger` returns: the middleware, ``close()`` (closes the progress line and the
    TensorBoard writer) and ``log_dir``."""

    log_dir: str

    def __call__(self, ctx: OnlineRLContext) -> None: ...

    def close(self) -> None: ...


@for_all_roles(reads=["train_output?", "eval_value?", "eval_output?", "info_for_logging?", "env_step?",
                      "train_iter?", "env_episode?"])
def online_logger(exp_name: Optional[str] = None, log_dir: Optional[str] = None, record_train_iter: bool = False,
                  train_show_freq: int = 100, progress: bool = True, progress_interval: float = 2.0,
                  tensorboard: bool = True, stream: Optional[TextIO] = None, total_env_step: Optional[int] = None,
                  use_tqdm: Optional[bool] = None) -> LoggerMiddleware:
    """Log training and evaluation scalars to TensorBoard and show a progress line.

    Reads ``ctx.train_output`` (a list of :class:`~pipeline.data.records.TrainOutput`; only read,
    never modified), ``ctx.eval_value``, ``ctx.eval_output``, ``ctx.info_for_logging``,
    ``ctx.env_step``, ``ctx.train_iter``, ``ctx.env_episode``. Writes nothing to the context.

    Scalars go to ``log_dir`` (default ``<exp_name>/log``; ``exp_name`` defaults to ``'exp'``)
    with the env step as x-axis (the train iteration with ``record_train_iter``): train scalars
    ``train/<name>`` at most once per ``train_show_freq`` train iterations (means since the
    last write), eval scalars ``eval/episode_return_mean|std|max|min`` whenever an evaluation ran,
    and collect episode returns. TensorBoard is imported on the first write; when it is not
    installed scalars are skipped with one warning.

    The progress line is a :class:`ProgressDisplay`: a tqdm bar on a terminal, with the rate and, given
    ``total_env_step`` (the run's budget), the time left to that budget (labelled so: a run that stops on
    an evaluation target ends earlier; the bar left at the end then shows none); plain lines every
    ``progress_interval`` seconds otherwise. After its counters (``train_iter``, ``episodes``) it shows
    ``return`` (mean of the last :data:`RETURN_WINDOW` training episodes), ``updates/s`` (train iterations
    per wall second over the last 10 s), ``eval`` (the last evaluation's mean return) and ``loss``; each is
    also a TensorBoard scalar under the same name, ``progress/<name>`` (:data:`PROGRESS_TAGS`): ``return``
    when training episodes finish, ``eval`` after each evaluation, ``updates/s`` and ``loss`` with the train
    scalars. In a multi-node run the line names the node and its roles; a node that shares ``rlpipe run``'s
    console with the learner (:func:`pipeline.runtime.node.node_is_quiet`) shows none.
    Not role-gated: every node logs what it has.
    """
    quiet = node_is_quiet()
    exp_name = exp_name or 'exp'
    log_dir = log_dir or os.path.join(exp_name, 'log')
    out: TextIO = stream if stream is not None else sys.stderr
    state: _LoggerState = {'writer': None, 'tb_failed': not tensorboard, 'last_train_write': None,
                             'acc': {}, 'acc_n': {}, 'last_print': 0.0, 'last_loss': None, 'last_eval': None,
                             't0': None, 'display': None, 'returns': deque(maxlen=RETURN_WINDOW),
                             'rate': UpdateRate(), 'ups': None}

    def writer() -> Optional[_CtrlCSafeWriter]:
        if state['writer'] is None and not state['tb_failed']:
            try:
                from torch.utils.tensorboard import SummaryWriter  # lazy: imports tensorboard
                state['writer'] = _CtrlCSafeWriter(SummaryWriter(log_dir))
            except Exception as e:  # ImportError without tensorboard
                state['tb_failed'] = True
                log.warning('online_logger: TensorBoard unavailable (%s); scalars are not written', e)
        return state['writer']

    def _log(ctx: OnlineRLContext) -> None:
        now = time.monotonic()
        if state['t0'] is None:
            state['t0'] = now
        x = ctx.train_iter if record_train_iter else ctx.env_step
        state['ups'] = state['rate'].update(ctx.train_iter)
        to = ctx.train_output
        if to:
            for k, v in scalar_means(to).items():
                state['acc'][k] = state['acc'].get(k, 0.0) + v
                state['acc_n'][k] = state['acc_n'].get(k, 0) + 1
            if 'total_loss' in state['acc']:
                state['last_loss'] = state['acc']['total_loss'] / state['acc_n']['total_loss']
            last = state['last_train_write']
            if last is None or ctx.train_iter - last >= train_show_freq:
                w = writer()
                if w is not None:
                    for k, s in state['acc'].items():
                        w.add_scalar(f'train/{k}', s / state['acc_n'][k], x)
                    if state['last_loss'] is not None:
                        w.add_scalar('progress/loss', state['last_loss'], x)
                    if state['ups'] is not None:
                        w.add_scalar('progress/updates/s', state['ups'], x)
                state['acc'], state['acc_n'] = {}, {}
                state['last_train_write'] = ctx.train_iter
        info = ctx.info_for_logging
        if info and info.get('collect_episode_return'):
            rets = info['collect_episode_return']
            state['returns'].extend(float(r) for r in rets)
            w = writer()
            if w is not None:
                w.add_scalar('collect/episode_return_mean', sum(rets) / len(rets), x)
                w.add_scalar('progress/return', sum(state['returns']) / len(state['returns']), x)
        if info and info.get('collect_score'):
            w = writer()
            if w is not None:
                w.add_scalar('collect/score_mean', sum(info['collect_score']) / len(info['collect_score']), x)
        ev = getattr(ctx, 'eval_value', -math.inf)
        if ev is not None and ev > -math.inf:
            state['last_eval'] = ev
            w = writer()
            if w is not None:
                w.add_scalar('eval/episode_return_mean', ev, x)
                w.add_scalar('progress/eval', ev, x)
                eo = getattr(ctx, 'eval_output', None)
                if isinstance(eo, MappingABC) and eo.get('episode_return') is not None:
                    r = eo['episode_return']
                    w.add_scalar('eval/episode_return_std', float(r.std()), x)
                    w.add_scalar('eval/episode_return_max', float(r.max()), x)
                    w.add_scalar('eval/episode_return_min', float(r.min()), x)
                w.flush()
        if progress and not quiet:
            disp = state['display']
            if disp is None:
                disp = state['display'] = ProgressDisplay(out, total_env_step, node_label(), progress_interval,
                                                          use_tqdm)
            parts = [f'train_iter {ctx.train_iter}', f'episodes {getattr(ctx, "env_episode", 0)}']
            if state['returns']:
                parts.append(f'return {sum(state["returns"]) / len(state["returns"]):.1f}')
            if state['ups'] is not None:
                parts.append(f'updates/s {state["ups"]:.0f}')
            if state['last_eval'] is not None:
                parts.append(f'eval {state["last_eval"]:.1f}')
            if state['last_loss'] is not None:
                parts.append(f'loss {state["last_loss"]:.4f}')
            disp.update(int(ctx.env_step), ' | '.join(parts))

    def close() -> None:
        if state['display'] is not None:
            state['display'].close()
            state['display'] = None
        if state['writer'] is not None:
            state['writer'].close()
            state['writer'] = None

    setattr(_log, 'close', close)
    setattr(_log, 'log_dir', log_dir)
    return cast(LoggerMiddleware, _log)  # a function with ``close`` and ``log_dir`` attributes
