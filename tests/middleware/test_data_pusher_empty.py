"""data_pusher with nothing to push (issue 28, item 10): a pipeline where nothing before it fills
ctx.transitions or ctx.episodes gets one warning after ``warn_after`` steps instead of silence; steps without
data after data came (a distributed learner whose wait for collectors timed out) are not reported."""
import logging

import pytest

from contexts import OnlineRLContext
from middleware import data_pusher
from pipeline import task
from pipeline.data import DequeBuffer

MSG = 'data_pusher: nothing to push in its first'


def _run(steps, source, caplog, **kw):
    buf = DequeBuffer(100)
    with caplog.at_level(logging.WARNING), task.start(ctx=OnlineRLContext(), fields_check='off'):
        task.use(source)
        task.use(data_pusher({}, buf, **kw))
        task.run(max_step=steps)
    return buf, [r.getMessage() for r in caplog.records if MSG in r.getMessage()]


def test_no_collector_before_it_is_warned_once(caplog):
    buf, said = _run(30, lambda ctx: None, caplog)
    assert buf.count() == 0
    assert len(said) == 1 and 'first 10 steps' in said[0] and 'collector' in said[0], said


def test_empty_steps_after_data_came_are_not_reported(caplog):
    def sometimes(ctx):  # a distributed learner: data in the first step, then steps whose wait timed out
        if ctx.total_step in (0, 25):
            ctx.transitions = [{'obs': 1}, {'obs': 2}]

    buf, said = _run(40, sometimes, caplog)
    assert buf.count() == 4 and said == []


def test_episodes_count_as_data_and_warn_after_0_is_silent(caplog):
    def episodes(ctx):
        if ctx.total_step == 3:
            ctx.episodes = [[{'obs': 1}]]

    buf, said = _run(20, episodes, caplog)
    assert buf.count() == 1 and said == []
    _, said = _run(20, lambda ctx: None, caplog, warn_after=0)
    assert said == []
    with pytest.raises(ValueError, match='warn_after'):
        data_pusher({}, DequeBuffer(10), warn_after=-1)
