"""Seeing it learn (issue 48): the progress line shows numbers that move while a run learns (recent
training-episode return, updates per second, last evaluation), and TensorBoard has each of them under
the same name, ``progress/<name>``."""
import io
import re

import pytest

from contexts import OnlineRLContext
from middleware import online_logger
from middleware.functional import logger as logger_mod


class FakeClock:
    def __init__(self):
        self.t = 1000.0

    def monotonic(self):
        return self.t


@pytest.fixture
def clock(monkeypatch):
    c = FakeClock()

    class FakeTime:
        monotonic = staticmethod(c.monotonic)
        perf_counter = staticmethod(c.monotonic)

    monkeypatch.setattr(logger_mod, 'time', FakeTime)
    return c


def named_numbers(line):
    """``{name: value}`` of the ``name value`` fields after the counters of a plain progress line."""
    fields = [f.strip() for f in line.split(' | ')]
    out = {}
    for f in fields:
        m = re.fullmatch(r'(\S+) (-?\d+(?:\.\d+)?)', f)
        if m and m.group(1) not in ('env_step', 'train_iter', 'episodes'):
            out[m.group(1)] = float(m.group(2))
    return out


def test_update_rate_is_recent_train_iterations_per_second():
    t = [0.0]
    r = logger_mod.UpdateRate(window=10.0, clock=lambda: t[0])
    assert r.update(0) is None  # no rate over ~0 s
    for i in range(1, 31):  # 100 iterations per second for 30 s
        t[0] = float(i)
        rate = r.update(100 * i)
    assert rate == pytest.approx(100.0, rel=0.01)
    for i in range(31, 51):  # then 10 per second: the rate follows within the window, not the mean since start
        t[0] = float(i)
        rate = r.update(3000 + 10 * (i - 30))
    assert rate == pytest.approx(10.0, rel=0.01)


def test_progress_line_shows_a_moving_signal_with_the_names_tensorboard_uses(tmp_path, clock):
    buf = io.StringIO()
    lg = online_logger(log_dir=str(tmp_path / 'log'), train_show_freq=50, progress_interval=0.0, stream=buf,
                       use_tqdm=False)
    ctx = OnlineRLContext()
    lines = []
    for step in range(1, 41):
        clock.t += 0.5  # 2 pipeline steps per wall second, 4 train iterations each: 8 updates/s
        ctx = ctx.renew()
        ctx.env_step, ctx.train_iter, ctx.env_episode = 4 * step, 4 * step, step
        ctx.train_output = [{'total_loss': 1.0 / step}]
        ctx.info_for_logging['collect_episode_return'] = [10.0 * step]  # training episodes get longer
        if step in (1, 40):
            ctx.eval_value = 9.0 if step == 1 else 500.0
        buf.seek(0)
        buf.truncate()
        lg(ctx)
        lines.append(buf.getvalue().strip())
    lg.close()
    first, last = named_numbers(lines[2]), named_numbers(lines[-1])
    # the old line showed "last eval 9.0" and a loss until the run ended: now the return and the rate move too
    assert first['return'] == pytest.approx(20.0) and first['eval'] == 9.0
    assert last['return'] == pytest.approx(sum(10.0 * s for s in range(31, 41)) / 10)  # the last 10 episodes
    assert last['updates/s'] == pytest.approx(8.0, rel=0.02)
    assert last['eval'] == 500.0 and 'loss' in last
    assert set(last) == set(logger_mod.PROGRESS_TAGS)

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    acc = EventAccumulator(str(tmp_path / 'log'))
    acc.Reload()
    tags = set(acc.Tags()['scalars'])
    for name, value in last.items():  # every number on the line is in TensorBoard under the same name
        assert f'progress/{name}' in tags, (name, sorted(tags))
    ret = acc.Scalars('progress/return')
    assert ret[-1].step == 160 and ret[-1].value == pytest.approx(last['return'])
    assert [e.value for e in acc.Scalars('progress/eval')] == [9.0, 500.0]
    ups = acc.Scalars('progress/updates/s')
    assert ups and ups[-1].value == pytest.approx(8.0, rel=0.05)
