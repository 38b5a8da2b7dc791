"""LearnerGroup with Ray learner actors: identical weights, single-learner equivalence, refs, faults.

Runs on a local Ray (2 CPUs, no dashboard); skipped with a visible reason without the ray extra.
"""
from __future__ import annotations

import functools
import os
import sys

import pytest
import torch
from torch import nn

ray = pytest.importorskip("ray", reason="the ray extra is not installed (pip install rlpipe[ray])")

from pipeline.config import compile_config  # noqa: E402
from pipeline.learner import Learner, LearnerGroup  # noqa: E402
from pipeline.learner.ray_learners import collective_backend, shard_for_rank, total_minibatches  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
pytestmark = [pytest.mark.timeout(240), pytest.mark.multiprocess]


class Regression(Learner):
    delay = 0.0  # seconds each forward pass sleeps (set on the actors to make updates slow)

    def forward_train(self, module_id, batch):
        if self.delay:
            import time

            time.sleep(self.delay)
        return self.modules[module_id](batch["x"]).squeeze(-1)

    def compute_loss_for_module(self, module_id, batch, fwd_out):
        return ((fwd_out - batch["y"]) ** 2).mean()


def make_regression(lr=0.05, grad_clip=None):
    torch.manual_seed(0)
    return Regression(nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 1)), lr=lr, grad_clip=grad_clip)


def make_dqn():
    from pipeline.policy.dqn import DQNPolicy

    cfg = compile_config({"policy": {"model": {"obs_shape": 4, "action_shape": 2}, "learn": {"target_update_freq": 2}}})
    return DQNPolicy(cfg, seed=0).learn_mode


def make_ppo():
    import gymnasium as gym

    from pipeline.policy.ppo import PPOPolicy, make_ppo_config

    # advantages normalised per minibatch would differ between a shard and the whole batch
    cfg = make_ppo_config({"policy": {"learn": {"normalize_advantage": False}}})
    return PPOPolicy(cfg, gym.spaces.Box(-1.0, 1.0, (4,)), gym.spaces.Discrete(2), seed=0).learn_mode


def ppo_data(n, seed=3):
    g = torch.Generator().manual_seed(seed)
    return {
        "obs": torch.randn(n, 4, generator=g),
        "action": torch.randint(0, 2, (n,), generator=g),
        "logp": torch.full((n,), -0.69) + 0.05 * torch.randn(n, generator=g),
        "advantage": torch.randn(n, generator=g),
        "return": torch.randn(n, generator=g),
        "value": torch.randn(n, generator=g),
    }


def data(n, seed=1):
    g = torch.Generator().manual_seed(seed)
    return {"x": torch.randn(n, 3, generator=g), "y": torch.randn(n, generator=g)}


def dqn_data(n, seed=2):
    g = torch.Generator().manual_seed(seed)
    return {
        "obs": torch.randn(n, 4, generator=g),
        "action": torch.randint(0, 2, (n,), generator=g),
        "reward": torch.randn(n, generator=g),
        "next_obs": torch.randn(n, 4, generator=g),
        "terminated": torch.rand(n, generator=g) < 0.2,
    }


@pytest.fixture(scope="module")
def local_ray():
    path = os.pathsep.join([ROOT, HERE] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, runtime_env={"env_vars": {"PYTHONPATH": path}})
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def shared_group(local_ray):
    group = LearnerGroup(make_regression, num_learners=2, num_cpus_per_learner=0.5, max_requests_in_flight=2)
    yield group
    group.shutdown()


@pytest.fixture
def reg_group(shared_group):
    """The shared 2-learner group, reset to a fresh learner's state (weights, optimizer, counters)."""
    shared_group.set_state(make_regression().get_state())
    return shared_group


def weights(group_or_learner):
    if isinstance(group_or_learner, LearnerGroup):
        return group_or_learner.foreach_learner(lambda l: {k: v.clone() for k, v in l.get_weights()["default_policy"].items()})
    return [{k: v.clone() for k, v in group_or_learner.get_weights()["default_policy"].items()}]


def assert_same(a, b, atol=1e-5):
    assert a.keys() == b.keys()
    for k in a:
        assert torch.allclose(a[k], b[k], atol=atol), (k, (a[k] - b[k]).abs().max())


def test_shard_plan_never_leaves_a_learner_empty():
    b = {"p": data(5), "q": data(1)}
    shards = [shard_for_rank(b, r, 2) for r in range(2)]
    assert [len(s["p"]["y"]) for s in shards] == [3, 2]
    assert [len(s["q"]["y"]) for s in shards] == [1, 1]  # fewer rows than learners: row r % rows
    assert total_minibatches({"p": 5, "q": 1}, 2, minibatch_size=2, num_epochs=3, num_total_minibatches=0) == 5
    assert total_minibatches({"p": 5}, 2, minibatch_size=None, num_epochs=3, num_total_minibatches=0) == 0


def test_gradients_go_over_gloo_on_cpu_and_nccl_on_gpu():
    assert collective_backend(make_regression().modules["default_policy"].parameters()) == "gloo"

    class OnGpu:  # a stand-in: this machine has no GPU
        is_cuda = True

    assert collective_backend([torch.zeros(1), OnGpu()]) == "nccl"


@pytest.mark.parametrize("factory,make_batch,rows", [
    (functools.partial(make_regression, grad_clip=0.5), data, 16),
    (make_dqn, dqn_data, 32),
    (make_ppo, ppo_data, 32),
])
def test_two_learners_stay_identical_and_match_one_learner(local_ray, factory, make_batch, rows):
    group = LearnerGroup(factory, num_learners=2, num_cpus_per_learner=0.25)
    single = factory()
    try:
        for step in range(4):
            batch = make_batch(rows, seed=step)
            res = group.update(batch=batch, num_epochs=2)
            single.update(batch=batch, num_epochs=2)
        w0, w1 = weights(group)
        assert_same(w0, w1, atol=0)  # the learners hold bit-identical weights
        assert_same(w0, weights(single)[0])  # and equal one learner trained on the whole batches
        assert res["__all_modules__"]["num_env_steps_trained"].peek() == 2 * rows
        assert group.weights_seq_no == 4
    finally:
        group.shutdown()


def test_uneven_and_tiny_shards_do_not_deadlock(reg_group):
    group = reg_group
    res = group.update(batch=data(7), minibatch_size=2, num_epochs=3)  # shards of 4 and 3 rows
    counts = group.foreach_learner(lambda l: l.num_minibatch_updates_lifetime)
    assert counts == [6, 6]  # ceil(3 * 4 / 2) on both
    assert res["default_policy"]["num_module_steps_trained"].peek() == 2 * 6 * 2
    group.update(batch=data(1))  # one row, two learners
    w0, w1 = weights(group)
    assert_same(w0, w1, atol=0)
    with pytest.raises(ValueError, match="zero rows"):  # an empty batch: every learner refuses it, none waits
        group.update(batch=data(0))
    group.update(batch=data(3), minibatch_size=2, num_epochs=2)  # and the group still trains afterwards
    w0, w1 = weights(group)
    assert_same(w0, w1, atol=0)


def test_update_from_object_refs_and_async(reg_group):
    group = reg_group
    single = make_regression()
    parts = [data(6, seed=s) for s in range(3)]
    refs = [ray.put(p) for p in parts]
    group.update(batch_refs=refs)
    single.update(batches=parts)
    assert_same(weights(group)[0], weights(single)[0])
    pending = []
    for s in range(3):
        pending += group.update(batch=data(8, seed=10 + s), async_update=True)
    pending += group.wait_for_updates()
    assert len(pending) == 3  # every queued update reported once, none dropped
    assert group.weights_seq_no == 4
    with pytest.raises(ValueError, match="data_iterators"):
        group.update(data_iterators=iter([data(4)]), num_iters=1)


def test_async_update_returns_without_waiting_for_the_update(reg_group):
    group = reg_group
    group.foreach_learner(lambda l: setattr(l, "delay", 1.0))  # every update takes >= 1 s
    try:
        first = group.update(batch=data(8, seed=1), async_update=True)
        assert first == []  # queued, not waited for: nothing has finished yet
        second = group.update(batch=data(8, seed=2), async_update=True)
        assert second == []  # two in flight (max_requests_in_flight=2)
        third = group.update(batch=data(8, seed=3), async_update=True)
        assert len(third) >= 1  # a third must wait for the oldest: its results come back then
        rest = group.wait_for_updates()
        assert len(third) + len(rest) == 3 and group.weights_seq_no == 3
    finally:
        group.foreach_learner(lambda l: setattr(l, "delay", 0.0))


@ray.remote(num_cpus=0)
def collect_episode(seed, length):
    """A 'collector' task: its episode goes to the object store, the driver only holds the ref."""
    g = torch.Generator().manual_seed(seed)
    return [{"x": torch.randn(3, generator=g), "y": torch.randn((), generator=g)} for _ in range(length)]


def test_episodes_refs_are_resolved_in_the_learners_not_in_the_driver(reg_group, monkeypatch):
    group = reg_group
    refs = [collect_episode.remote(s, n) for s, n in ((0, 5), (1, 3), (2, 4))]
    ray.wait(refs, num_returns=len(refs))  # collected; still only refs in the driver
    episodes = [ray.get(r) for r in refs]  # the same data, fetched only to train the reference learner
    mine = {r.hex() for r in refs}
    fetched = []
    real_get = ray.get

    def spy(obj, *a, **kw):
        items = obj if isinstance(obj, (list, tuple)) else [obj]
        fetched.extend(r.hex() for r in items if isinstance(r, ray.ObjectRef) and r.hex() in mine)
        return real_get(obj, *a, **kw)

    monkeypatch.setattr(ray, "get", spy)
    res = group.update(episodes_refs=refs)
    assert fetched == []  # the driver never fetched the episodes
    single = make_regression()
    single.update(episodes=episodes)
    assert_same(weights(group)[0], weights(single)[0])
    assert res["default_policy"]["num_module_steps_trained"].peek() == 12


def test_a_killed_learner_is_reported(local_ray):
    group = LearnerGroup(make_regression, num_learners=2, num_cpus_per_learner=0.25)
    try:
        victim = group._actors[1]
        ray.kill(victim)
        with pytest.raises(RuntimeError, match="learner actor .* died"):
            group.update(batch=data(8))
    finally:
        group.shutdown()


def test_checkpoint_roundtrip(reg_group, tmp_path):
    group = reg_group
    group.update(batch=data(8))
    group.save_to_path(tmp_path / "ckpt")
    before = weights(group)[0]
    group.update(batch=data(8, seed=5))
    group.restore_from_path(tmp_path / "ckpt")
    w0, w1 = weights(group)
    assert_same(w0, before, atol=0)
    assert_same(w1, before, atol=0)
    assert group.weights_seq_no == 1
    fresh = make_regression().get_weights()  # set_weights reaches every learner; older versions are ignored
    assert group.set_weights(fresh, weights_seq_no=5)
    for w in weights(group) + [group.get_weights()["default_policy"]]:
        assert_same(w, fresh["default_policy"], atol=0)
    assert not group.set_weights({"default_policy": before}, weights_seq_no=4)
    assert_same(weights(group)[1], fresh["default_policy"], atol=0)
    assert group.weights_seq_no == 5


def test_too_many_cpus_is_a_clear_error(local_ray):
    with pytest.raises(ValueError, match="asks for 6 CPUs"):
        LearnerGroup(make_regression, num_learners=3, num_cpus_per_learner=2)
