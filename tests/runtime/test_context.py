import pickle

import pytest

from contexts import Context, OfflineRLContext, OnlineRLContext


def test_renew_resets_fields_and_counts_steps():
    ctx = OnlineRLContext()
    ctx.train_data = [1, 2]
    ctx.collect_kwargs["eps"] = 0.5
    ctx.extra = "dropped"
    new = ctx.renew()
    assert type(new) is OnlineRLContext and new is not ctx
    assert new.total_step == 1
    assert new.train_data is None
    assert new.collect_kwargs == {} and new.collect_kwargs is not ctx.collect_kwargs
    assert not hasattr(new, "extra")
    assert new.renew().renew().total_step == 3


def test_online_default_kept_keys():
    ctx = OnlineRLContext()
    ctx.env_step, ctx.env_episode, ctx.train_iter = 10, 2, 7
    ctx.last_eval_iter, ctx.last_eval_value = 5, 100.0
    ctx.eval_value = 3.0
    new = ctx.renew().renew()
    assert (new.env_step, new.env_episode, new.train_iter) == (10, 2, 7)
    assert (new.last_eval_iter, new.last_eval_value) == (5, 100.0)
    assert new.eval_value == float("-inf")


def test_offline_kept_keys_include_train_epoch():
    ctx = OfflineRLContext()
    ctx.train_epoch, ctx.trained_env_step, ctx.train_iter = 3, 640, 9
    ctx.train_data = "batch"
    new = ctx.renew().renew()
    assert (new.train_epoch, new.trained_env_step, new.train_iter) == (3, 640, 9)
    assert new.train_data is None


def test_keep_lasts_for_every_later_renew():
    ctx = Context()
    ctx.model_version = 4
    ctx.keep("model_version")
    for _ in range(5):
        ctx = ctx.renew()
    assert ctx.model_version == 4
    ctx.model_version = 6  # a kept value may change and the change is carried
    assert ctx.renew().model_version == 6


def test_keep_does_not_leak_between_instances():
    a, b = OnlineRLContext(), OnlineRLContext()
    a.keep("obs")
    a.obs = 1
    b.obs = 2
    assert a.renew().obs == 1
    assert b.renew().obs is None


def test_contexts_pickle_round_trip_with_extra_attributes():
    ctx = OnlineRLContext(env_step=3)
    ctx.keep("custom")
    ctx.custom = {"a": 1}
    ctx = ctx.renew()
    back = pickle.loads(pickle.dumps(ctx))
    assert back.env_step == 3 and back.custom == {"a": 1} and back.total_step == 1
    assert back.renew().custom == {"a": 1}


def test_get_with_default():
    ctx = Context()
    assert ctx.get("missing", 5) == 5
    ctx.x = 1
    assert ctx.get("x") == 1
