"""The buffer as storage + sampler (issue 25): PrioritizedSampler draws exactly what PER drew before
it became a sampler, update_priority, and files from before the sampler."""
import hashlib
import json
import warnings

import numpy as np
import pytest
import torch

from pipeline.data import DequeBuffer, PrioritizedSampler, UniformSampler, _accel
from pipeline.data.protocols import samples_by_priority, wants_priorities

# sha256 of the scenario's draws (indices and weights) for seeds 11 and 3, computed with the code of
# main before the sampler existed (PriorityExperienceReplay as a middleware with its own fast paths)
PINNED = {
    "C": "46c6a6f6483218ee42b55278ff86f626f9138c7f11d422092d529929df262c20",
    "numpy": "f0bfc35f510def64350015b070bd130d8baaa3dcc9b1b39e1931ff78b5f6daec",
}
FIRST = {  # the first sample(8), sample_batch(32) and sample_batch(100) of the same runs, readable
    "C": ([338, 149, 44, 278, 321, 284, 153, 41], [236, 201, 153, 61, 166, 240, 324, 128],
          [74, 94, 267, 141, 193, 315, 91, 211]),
    "numpy": ([40, 338, 149, 213, 44, 120, 278, 321], [92, 166, 278, 177, 216, 70, 240, 266],
              [125, 173, 44, 215, 89, 290, 202, 58]),
}


def _sampler(size, seed):
    return DequeBuffer(size, seed=seed, sampler=PrioritizedSampler(alpha=0.6, beta=0.4, anneal=50))


def _scenario(build):
    """Rejection draws, tree draws, replacement, sample_range, priority updates, evictions, a skewed buffer."""
    out = []
    buf = build(300, 11)
    rng = np.random.default_rng(5)
    for i in range(340):
        buf.push({"x": np.full(3, i, np.float32)}, meta={"priority": float(rng.random() * 4 + 0.05)})
    for step in range(12):
        items = buf.sample(8)
        out.append([it.index for it in items])
        out.append([round(it.meta["priority_IS"], 6) for it in items])
        buf.update_many([it.index for it in items], meta={"priority": rng.random(8) * 5})
        b = buf.sample_batch(32)
        out.append(b["indices"].tolist())
        out.append([round(w, 6) for w in b.get("weight").tolist()])
        buf.update_many(b["indices"].tolist(), meta={"priority": rng.random(32) * 3})
        b = buf.sample_batch(100)
        out.append(b["indices"].tolist())
        buf.update_many(b["indices"].tolist(), meta={"priority": rng.random(100) * 2 + 0.01})
        out.append([it.index for it in buf.sample(6, replace=True)])
        out.append([it.index for it in buf.sample(4, sample_range=slice(-50, None))])
        out.append([it.index for it in buf.sample(4, replace=True, sample_range=slice(-50, None))])
        buf.push({"x": np.full(3, 1000 + step, np.float32)})
    skew = build(2000, 3)
    for i in range(2000):
        skew.push({"x": np.full(3, i, np.float32)}, meta={"priority": 1000.0 if i % 97 == 0 else 0.01})
    for _ in range(10):
        b = skew.sample_batch(16)
        out.append(b["indices"].tolist())
        skew.update_many(b["indices"].tolist(), meta={"priority": np.full(16, 0.5)})
    return out


@pytest.mark.usefixtures("kernel")
def test_prioritized_draws_for_a_fixed_seed_are_those_of_per_before_the_sampler():
    name = "C" if _accel.EXT is not None else "numpy"
    out = _scenario(_sampler)
    assert (out[0], out[2][:8], out[4][:8]) == FIRST[name]
    assert hashlib.sha256(json.dumps(out).encode()).hexdigest() == PINNED[name]


@pytest.mark.usefixtures("kernel")
def test_update_priority_and_update_many_are_one_route():
    a, b = _sampler(64, 0), _sampler(64, 0)
    for buf in (a, b):
        for i in range(64):
            buf.push({"x": np.full(2, i, np.float32)}, meta={"priority": 1.0})
    for step in range(5):
        ba, bb = a.sample_batch(16), b.sample_batch(16)
        assert ba["indices"].tolist() == bb["indices"].tolist() and torch.equal(ba["weight"], bb["weight"])
        pri = np.linspace(0.5, 4.0, 16) + step
        assert a.update_priority(ba["indices"].tolist(), pri) == [True] * 16
        assert b.update_many(bb["indices"].tolist(), meta={"priority": pri}) == [True] * 16
    assert np.array_equal(a.sampler._tree.leaves, b.sampler._tree.leaves)
    assert all(a.get_by_index(i).meta["priority"] == a.sampler.priority(i) for i in a.indices())
    assert a.update_priority([ba["indices"].tolist()[0], 10**6], [2.0, 3.0]) == [True, False]  # gone: skipped
    assert a.update_priority(torch.tensor(ba["indices"].tolist()[:2]), torch.tensor([1.0, 2.0], requires_grad=True) * 1) == [True] * 2


def test_update_priority_refuses_bad_input_in_one_line():
    buf = _sampler(8, 0)
    for i in range(8):
        buf.push(i)
    idx = buf.indices()[:3]
    for bad in ([1.0, float("nan"), 1.0], [1.0, -1.0, 1.0], [np.inf, 1.0, 1.0], np.array([1.0, np.nan, 2.0])):
        with pytest.raises(ValueError, match="finite and >= 0"):
            buf.update_priority(idx, bad)
    assert all(buf.sampler.priority(i) == 1.0 for i in idx)  # nothing written
    with pytest.raises(ValueError, match="2 priorities for 3 indices"):
        buf.update_priority(idx, [1.0, 2.0])
    uniform = DequeBuffer(8)
    uniform.push(0)
    with pytest.raises(TypeError, match="samples uniformly"):
        uniform.update_priority([0], [1.0])
    with pytest.raises(ValueError, match="priority must be a finite number"):
        buf.push(9, meta={"priority": -1.0})


def test_the_buffer_is_storage_plus_sampler():
    buf = DequeBuffer(10, seed=0)
    assert isinstance(buf.sampler, UniformSampler) and not samples_by_priority(buf)
    with pytest.raises(TypeError, match=r"DequeBuffer\(size, sampler=\.\.\.\)"):
        buf.use(PrioritizedSampler())  # DI-engine's buf.use(PriorityExperienceReplay(buf)): not a middleware here
    pbuf = DequeBuffer(10, sampler=PrioritizedSampler())
    assert samples_by_priority(pbuf) and wants_priorities(pbuf)
    assert pbuf.view().sampler is pbuf.sampler and wants_priorities(pbuf) and pbuf.middleware == []
    with pytest.raises(ValueError, match="already used by another buffer"):
        DequeBuffer(10, sampler=pbuf.sampler)
    with pytest.raises(ValueError, match="groupby"):
        pbuf.push(1, meta={"g": 0}) and pbuf.sample(1, groupby="g")
    with pytest.raises(TypeError, match="needs a sampler"):
        DequeBuffer(10, sampler=object())


def _saved_with_states(tmp_path, keys):
    """A file of 20 prioritized items after two draws, its sampler state saved under ``keys``: what
    rlpipe wrote with the PriorityExperienceReplay middleware (["0:PriorityExperienceReplay"] before
    samplers existed, then also "sampler:PrioritizedSampler")."""
    src = _sampler(20, 0)
    for i in range(20):
        src.push({"x": np.full(2, i, np.float32)}, meta={"priority": float(i + 1)})
    src.sample_batch(4)
    src.sample_batch(4)
    src.update_priority([3], [50.0])  # written into meta when saved
    path = str(tmp_path / "a.pt")
    src.save_data(path)
    payload = torch.load(path, weights_only=True)
    state = payload["middleware"].pop("sampler:PrioritizedSampler")
    payload["middleware"].update({k: state for k in keys})
    torch.save(payload, path)
    return path


def test_files_of_the_former_middleware_with_a_sampler_state_load_it(tmp_path):
    path = _saved_with_states(tmp_path, ["0:PriorityExperienceReplay", "sampler:PrioritizedSampler"])
    dst = _sampler(20, 1)
    dst.load_data(path)
    assert dst.sampler.sample_count == 2 and dst.sampler.max_priority == 50.0
    assert all(dst.sampler.priority(i) == (50.0 if i == 3 else float(i + 1)) for i in dst.indices())


def test_files_from_before_samplers_load_items_and_priorities_not_the_counters(tmp_path):
    path = _saved_with_states(tmp_path, ["0:PriorityExperienceReplay"])
    dst = _sampler(20, 1)
    with pytest.warns(UserWarning, match="not the state of the removed 0:PriorityExperienceReplay"):
        dst.load_data(path)
    assert dst.indices() == list(range(20)) and dst.middleware == []
    assert all(dst.sampler.priority(i) == (50.0 if i == 3 else float(i + 1)) for i in dst.indices())
    assert dst.sampler.sample_count == 0 and dst.sampler.beta == 0.4  # the annealing starts again
    dst.sample_batch(4)
    uniform = DequeBuffer(20)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        uniform.load_data(path)  # nothing lost that this buffer would keep: no warning
    assert uniform.indices() == list(range(20))
