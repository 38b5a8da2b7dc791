"""Hypothesis: random operation sequences against a simple model of a FIFO buffer."""
from collections import OrderedDict

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from pipeline.data import DequeBuffer, PrioritizedSampler

from kernel_switch import available, use_kernel


class BufferMachine(RuleBasedStateMachine):
    """The model: an OrderedDict index -> (data value, meta) in push order, capacity ``size``."""

    @initialize(size=st.integers(1, 12), per=st.sampled_from([None] + available()), seed=st.integers(0, 2**16))
    def setup(self, size, per, seed):
        self.size = size
        self.per = None
        if per:  # PER with the compiled kernels or with numpy
            with use_kernel(per):
                self.buf = DequeBuffer(size, seed=seed, sampler=PrioritizedSampler(alpha=1.0))
            self.per = self.buf.sampler
            assert self.per.kernel == per
        else:
            self.buf = DequeBuffer(size, seed=seed)
        self.model = OrderedDict()
        self.next_id = 0
        self.counter = 0

    def _data(self, v):
        return {"obs": torch.full((2,), float(v)), "a": int(v)}

    @rule(group=st.integers(0, 2))
    def push(self, group):
        self.counter += 1
        v = self.counter
        item = self.buf.push(self._data(v), meta={"g": group})
        assert item.index == self.next_id
        if len(self.model) == self.size:
            self.model.popitem(last=False)
        self.model[item.index] = (v, group)
        self.next_id += 1

    @rule(k=st.integers(0, 14), replace=st.booleans())
    def sample(self, k, replace):
        n = len(self.model)
        if (n == 0 and k > 0) or (not replace and k > n):
            try:
                self.buf.sample(k, replace=replace)
            except ValueError:
                pass
            else:
                raise AssertionError("sample should have raised ValueError")
            got = self.buf.sample(k, replace=replace, ignore_insufficient=True)
            assert len(got) == (0 if n == 0 else (k if replace else n))
        else:
            got = self.buf.sample(k, replace=replace)
            assert len(got) == k
        ids = [it.index for it in got]
        if not replace:
            assert len(set(ids)) == len(ids)
        for it in got:
            assert it.index in self.model
            assert it.data["a"] == self.model[it.index][0]
            if self.per is not None:
                assert 0 < it.meta["priority_IS"] <= 1.0 + 1e-6

    @precondition(lambda self: len(self.model) > 0)
    @rule(k=st.integers(1, 8), data=st.data())
    def sample_batch(self, k, data):
        k = min(k, len(self.model))
        b = self.buf.sample_batch(k)
        assert len(set(b["indices"].tolist())) == k
        expect = [self.model[i][0] for i in b["indices"].tolist()]
        assert b["a"].tolist() == expect
        assert b["obs"][:, 0].tolist() == [float(v) for v in expect]

    @rule(data=st.data())
    def sample_range(self, data):
        n = len(self.model)
        if n == 0:
            return
        start = data.draw(st.integers(-n, n - 1))
        order = list(self.model)
        allowed = set(order[slice(start, None)])
        got = self.buf.sample(len(allowed), sample_range=slice(start, None))
        assert {it.index for it in got} == allowed

    @rule(data=st.data(), missing=st.booleans())
    def delete(self, data, missing):
        if missing or not self.model:
            assert self.buf.delete(self.next_id + 5) == 0
            return
        victims = data.draw(st.lists(st.sampled_from(list(self.model)), min_size=1, max_size=3, unique=True))
        assert self.buf.delete(victims) == len(victims)
        for v in victims:
            del self.model[v]

    @rule(data=st.data(), pri=st.floats(0.0, 10.0))
    def update(self, data, pri):
        if not self.model or data.draw(st.booleans()):
            assert self.buf.update(self.next_id + 1, meta={"priority": 1.0}) is False
            return
        i = data.draw(st.sampled_from(list(self.model)))
        self.counter += 1
        v = self.counter
        assert self.buf.update(i, data=self._data(v), meta={"priority": pri})
        self.model[i] = (v, self.model[i][1])

    @rule(data=st.data())
    def regroup(self, data):
        if not self.model:
            return
        i = data.draw(st.sampled_from(list(self.model)))
        g = data.draw(st.integers(0, 2))
        assert self.buf.update(i, meta={"g": g})
        self.model[i] = (self.model[i][0], g)

    @rule(unroll=st.integers(1, 3))
    def groupby(self, unroll):
        groups = {}
        for i, (_v, g) in self.model.items():
            groups.setdefault(g, []).append(i)
        buf = DequeBuffer(self.size, storage=self.buf.storage)  # PER refuses groupby: a uniform buffer on the storage
        got = buf.sample(groupby="g")
        assert sorted([it.index for it in grp] for grp in got) == sorted(groups.values())
        eligible = [ids for ids in groups.values() if len(ids) >= unroll]
        runs = buf.sample(len(eligible), groupby="g", unroll_len=unroll)
        assert len(runs) == len(eligible)
        for run in runs:
            ids = [it.index for it in run]
            full = groups[run[0].meta["g"]]
            pos = full.index(ids[0])
            assert ids == full[pos:pos + unroll]

    @rule()
    def clear(self):
        if np.random.default_rng(self.counter).random() < 0.2:  # rare
            self.buf.clear()
            self.model.clear()

    @invariant()
    def consistent(self):
        if not hasattr(self, "buf"):
            return
        assert self.buf.count() == len(self.model)
        assert self.buf.indices() == list(self.model)
        for off, (i, (v, g)) in enumerate(self.model.items()):
            it = self.buf.get(off)
            assert it.index == i and it.data["a"] == v and it.meta["g"] == g
        if self.per is not None:
            leaves = self.per._tree.leaves
            assert (leaves > 0).sum() == len(self.model)


BufferMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=50, deadline=None,
                                           suppress_health_check=[HealthCheck.too_slow])
TestBufferMachine = BufferMachine.TestCase




@pytest.mark.usefixtures("kernel")
def test_per_frequencies_property():
    """For random priority vectors, PER draws (with replacement) follow p / sum(p)."""
    from hypothesis import given

    @settings(max_examples=10, deadline=None)
    @given(st.lists(st.floats(0.1, 10.0), min_size=2, max_size=6), st.integers(0, 1000))
    def check(pri, seed):
        buf = DequeBuffer(len(pri), seed=seed, sampler=PrioritizedSampler(alpha=1.0))
        for i, p in enumerate(pri):
            buf.push(i, meta={"priority": p})
        draws = 6000
        counts = np.zeros(len(pri))
        for _ in range(draws // 60):
            for it in buf.sample(60, replace=True):
                counts[it.data] += 1
        expect = np.array(pri) / sum(pri)
        # stratified sampling has lower variance than multinomial; 5 sigma of multinomial is loose
        sigma = np.sqrt(expect * (1 - expect) / draws)
        assert np.all(np.abs(counts / draws - expect) <= 5 * sigma + 1e-3), (counts / draws, expect)

    check()
