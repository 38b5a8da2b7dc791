"""Device placement (issue 31): the ``device`` setting, where modules, optimizer states, batches and acting
tensors live, weights and checkpoints across devices, and the ``--device`` flag.

This machine has no GPU: the placement logic is tested with the device as a parameter (``cpu``, and
``meta``, a device without data that shows every tensor that was, or was not, moved); the tests that
need CUDA skip with a reason and run where a GPU exists."""
import contextlib
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import torch
from torch import nn

from pipeline.config import ConfigError, compile_config
from pipeline.device import (DeviceError, device_spec_problem, node_learns, policy_device, resolve_device,
                             to_device, to_host)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HAVE_CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not HAVE_CUDA, reason='needs a CUDA GPU (torch.cuda.is_available() is False here)')
no_cuda = pytest.mark.skipif(HAVE_CUDA, reason='checks the refusal of a CUDA device on a machine without one')
DEVICES = ['cpu', 'meta', pytest.param('cuda', marks=needs_cuda)]


class _Stop(Exception):
    pass


def dqn_cfg(**policy):
    return compile_config({'policy': {'model': {'obs_shape': 4, 'action_shape': 2,
                                                'encoder_hidden_size_list': [16, 16]}, **policy}}, 'dqn')


def dqn_batch(n=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    return {'obs': torch.randn(n, 4, generator=g), 'action': torch.randint(0, 2, (n,), generator=g),
            'reward': torch.randn(n, generator=g), 'next_obs': torch.randn(n, 4, generator=g),
            'terminated': torch.zeros(n, dtype=torch.bool), 'weight': torch.ones(n)}


def tensors_of(module):
    return [*module.parameters(), *module.buffers()]


# ----------------------------------------------------------------------------- the setting
def test_the_setting_is_checked_and_the_old_cuda_key_says_what_replaced_it():
    for ok in ('auto', 'cpu', 'cuda', 'cuda:1', 'CUDA:0'):
        assert device_spec_problem(ok) is None, ok
    for bad in ('gpu', 'cuda:', 'cuda:x', '', 3):
        assert device_spec_problem(bad) is not None, bad
    cfg = dqn_cfg()
    assert cfg.policy.device == 'auto' and cfg.policy.acting_device is None and 'cuda' not in cfg.policy
    with pytest.raises(ConfigError) as e:
        compile_config({'policy': {'cuda': True}}, 'dqn')
    (msg,) = e.value.errors
    assert '\n' not in msg and msg.startswith('policy.cuda:') and 'policy.device' in msg and '--device' in msg
    with pytest.raises(ConfigError) as e:
        compile_config({'policy': {'device': 'gpu'}}, 'sac')
    assert "policy.device: must be 'auto', 'cpu', 'cuda' or 'cuda:N'" in e.value.errors[0]
    for algo in ('dqn', 'sac', 'ppo', 'bc', 'cql', 'iql', 'cql_continuous'):
        section = compile_config({}, algo).policy
        assert section.device == 'auto' and 'cuda' not in section, algo


def test_auto_is_the_cpu_without_a_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, 'is_available', lambda: False)
    assert resolve_device('auto') == resolve_device(None) == torch.device('cpu')
    assert resolve_device('CPU') == torch.device('cpu') and resolve_device(torch.device('meta')).type == 'meta'


@no_cuda
def test_cuda_without_a_gpu_is_refused_in_one_line():
    for spec in ('cuda', 'cuda:0'):
        with pytest.raises(DeviceError) as e:
            resolve_device(spec)
        msg = str(e.value)
        assert '\n' not in msg and ('without CUDA' in msg or 'no CUDA GPU' in msg)
        assert 'cpu' in msg and 'auto' in msg
    with pytest.raises(DeviceError):
        from pipeline.policy import DQNPolicy
        DQNPolicy(dqn_cfg(device='cuda'))


@no_cuda
def test_a_node_that_does_not_learn_acts_on_the_acting_device(monkeypatch):
    """A collector node of a multi-node run uses policy.acting_device (default the CPU): ``--device cuda`` for
    the learner does not stop a CPU-only collector machine."""
    from pipeline.policy import DQNPolicy
    from pipeline.run.precheck import device_problems

    user = {'policy': {'device': 'cuda'}}
    assert device_problems(user) and 'policy.device cuda' in device_problems(user)[0]
    monkeypatch.setenv('RLPIPE_NODE', '{"roles": ["collector"]}')
    assert not node_learns() and device_problems(user) == []
    policy = DQNPolicy(dqn_cfg(device='cuda'))
    assert policy.device == torch.device('cpu') and all(t.device.type == 'cpu' for t in tensors_of(policy.model))
    assert policy_device({'device': 'cuda', 'acting_device': 'meta'}).type == 'meta'
    assert device_problems({'policy': {'acting_device': 'cuda:0'}})  # checked on this node
    monkeypatch.setenv('RLPIPE_NODE', '{"roles": ["learner", "evaluator"]}')
    assert node_learns() and device_problems(user)


# ----------------------------------------------------------------------------- moves
def test_to_device_moves_every_tensor_once_and_keeps_the_rest():
    shared = torch.ones(3)
    batch = {'obs': torch.zeros(2, 4), 'nested': {'a': shared, 'b': [shared, 'text', 7], 'c': (torch.ones(1),)},
             'names': ['x', 'y'], 'arr': np.zeros(2)}
    out = to_device(batch, 'meta')
    assert out['obs'].device.type == out['nested']['a'].device.type == out['nested']['c'][0].device.type == 'meta'
    assert out['nested']['a'] is out['nested']['b'][0]  # the same tensor is moved once
    assert out['nested']['b'][1:] == ['text', 7] and out['names'] is batch['names'] and out['arr'] is batch['arr']
    assert batch['obs'].device.type == 'cpu'  # the input is not changed
    assert to_device(batch, 'cpu') is batch and to_host(batch) is batch  # nothing to move: the same object
    tree = pytest.importorskip('treetensor.torch')
    t = tree.Tensor({'a': torch.ones(2), 'b': {'c': torch.zeros(2)}})
    moved = to_device(t, 'meta')
    assert type(moved) is type(t) and moved.a.device.type == 'meta' and moved.b.c.device.type == 'meta'


# ----------------------------------------------------------------------------- placement, by device
def _policies(device):
    from pipeline.offline.bc import BCPolicy
    from pipeline.offline.cql_continuous import ContinuousCQLPolicy
    from pipeline.offline.iql import IQLPolicy
    from pipeline.policy import DQNPolicy
    from pipeline.policy.ppo import PPOPolicy
    from pipeline.policy.sac import SACPolicy
    import gymnasium as gym

    box = gym.spaces.Box(-1, 1, (3,))
    small = {'model': {'actor_hidden_size_list': [8], 'critic_hidden_size_list': [8]}}
    return [
        DQNPolicy(dqn_cfg(), seed=0, device=device),
        SACPolicy(compile_config({'policy': small}, 'sac'), 3, 2, seed=0, device=device),
        ContinuousCQLPolicy(compile_config({'policy': small}, 'cql_continuous'), 3, 2, seed=0, device=device),
        PPOPolicy(compile_config({'policy': {'model': {'hidden': [8], 'normalize_obs': True}}}, 'ppo'), box,
                  gym.spaces.Discrete(2), seed=0, device=device),
        BCPolicy(compile_config({'policy': {'model': {'hidden_size_list': [8]}}}, 'bc'), 3, 2, seed=0,
                 device=device),
        IQLPolicy(compile_config({'policy': small}, 'iql'), 3, 2, seed=0, device=device),
    ]


@pytest.mark.parametrize('device', DEVICES)
def test_policies_put_every_network_and_the_learner_on_the_device(device):
    dev = resolve_device(device)
    for policy in _policies(device):
        name = type(policy).__name__
        assert policy.device == dev, name
        learner = policy.learn_mode
        assert learner.device == dev, name
        modules = [*policy.networks().values(), *learner.modules.values(),
                   *(m for m in vars(learner).values() if isinstance(m, nn.Module))]  # target networks too
        for m in modules:
            assert all(t.device == dev for t in tensors_of(m)), (name, type(m).__name__)
    ppo = _policies(device)[3]
    assert ppo.model.obs_norm._mean32.device == dev  # the float32 copies of the running statistics follow


@pytest.mark.parametrize('device', DEVICES)
def test_every_tensor_of_a_sampled_batch_reaches_the_learner_on_its_device(device):
    """The batch the fetcher gives (a dict from the replay buffer, on the host) is on the learner's device
    in the forward pass: every field, including the importance weights."""
    from contexts import OnlineRLContext
    from middleware import offpolicy_data_fetcher
    from pipeline.data import DequeBuffer, PrioritizedSampler
    from pipeline.policy import DQNPolicy

    buf = DequeBuffer(64, seed=0, sampler=PrioritizedSampler(is_weight=True))
    rng = np.random.default_rng(0)
    for _ in range(40):
        buf.push({'obs': rng.standard_normal(4).astype(np.float32), 'action': int(rng.integers(2)),
                  'reward': float(rng.standard_normal()), 'next_obs': rng.standard_normal(4).astype(np.float32),
                  'terminated': False, 'truncated': False})
    cfg = dqn_cfg(learn={'batch_size': 16, 'learning_starts': 16})
    ctx = OnlineRLContext()
    next(offpolicy_data_fetcher(cfg, buf)(ctx))
    batch = ctx.train_data
    assert all(v.device.type == 'cpu' for v in batch.values()) and 'weight' in batch
    learner = DQNPolicy(cfg, seed=0, device=device).learn_mode
    seen = {}

    def spy(module_id, b):
        seen.update({k: v.device for k, v in b.items()})
        raise _Stop

    learner.forward_train = spy
    with pytest.raises(_Stop):
        learner.update(batch=batch)
    assert set(seen) == set(batch) and set(seen.values()) == {resolve_device(device)}


@pytest.mark.parametrize('device', ['meta', pytest.param('cuda', marks=needs_cuda)])
def test_learner_to_moves_the_optimizer_state_and_keeps_training_from_it(device):
    from pipeline.policy import DQNPolicy

    policy = DQNPolicy(dqn_cfg(), seed=0)
    learner = policy.learn_mode
    learner.update(batch=dqn_batch())  # an Adam state on the CPU
    policy.to(device)
    dev = resolve_device(device)
    params = list(policy.model.parameters())
    opt = learner.optimizer
    held = [p for g in opt.param_groups for p in g['params']]
    assert len(held) == len(params) and all(a is b for a, b in zip(held, params))  # the moved parameters
    for p in params:
        st = opt.state[p]
        assert st['exp_avg'].device == dev and st['exp_avg_sq'].device == dev
        # torch's rule for Adam's step counter: on the parameter's device for fused kernels, else on the host
        assert st['step'].device.type == (dev.type if opt.defaults.get('fused') else 'cpu')
    assert [p.device for p in learner._target_params] == [dev] * len(params)
    for cached in (learner._online_params, learner._params[learner.module_id]):
        assert len(cached) == len(params) and all(a is b for a, b in zip(cached, params))
    assert policy.collect_mode.model is policy.model and policy.device == dev


def test_metrics_kept_on_a_device_come_back_once_and_sum_as_on_the_host():
    from pipeline.learner import Learner
    from pipeline.learner.call_metrics import _pend

    learner = Learner(nn.Linear(2, 1))
    call = learner.call_metrics
    call.reset()
    vals = [torch.tensor(0.1), torch.tensor(0.2), torch.tensor(0.7)]
    acc = None
    for v in vals:
        acc = _pend(acc, v)
    acc = _pend(acc, 3)  # a number after tensors
    call.extras = {'default_policy': {'q': acc}}
    call.last_loss = {'default_policy': torch.tensor(1.25, requires_grad=True) * 1}
    losses = call.host_losses()
    expected = float(vals[0]) + float(vals[1]) + float(vals[2]) + 3.0  # the order and precision of the CPU path
    assert losses == {'default_policy': 1.25}
    assert call.extras['default_policy']['q'] == (expected, 4)


def test_acting_converts_the_observations_once_onto_the_networks_device():
    from pipeline.policy.dqn import DQNCollectMode, DQNEvalMode

    class Probe(nn.Module):
        """A network on 'meta' that records the device of its input and answers on the host."""

        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.zeros(1, device='meta'))
            self.seen = []

        def forward(self, x):
            self.seen.append((x.device.type, x.dtype))
            return torch.arange(3, dtype=torch.float32).repeat(x.shape[0], 1)

    probe = Probe()
    obs = np.zeros((5, 4), dtype=np.float64)
    assert DQNEvalMode(probe)(obs).tolist() == [2] * 5
    collect = DQNCollectMode(probe, 3, seed=0)
    acts = collect(obs, eps=0.5)  # some envs explore: the network runs on the others' rows only
    assert acts.shape == (5,) and isinstance(acts, np.ndarray) and len(probe.seen) == 2
    explored = np.random.default_rng(0).random(5) < 0.5
    assert 0 < explored.sum() < 5 and (acts[~explored] == 2).all()
    assert probe.seen and all(s == ('meta', torch.float32) for s in probe.seen)


def test_weights_sent_to_other_nodes_are_host_tensors():
    from middleware.exchange.shared import host_state
    from pipeline.learner.ray_learners import worker_device

    model = nn.Linear(3, 2)
    sent = host_state(model)
    assert all(v.device.type == 'cpu' and not v.requires_grad for v in sent.values())
    assert sent['weight'].data_ptr() == model.weight.data_ptr()  # on the CPU: no copy
    assert worker_device(None, [3]) == 'cuda:0' and worker_device(None, []) is None
    assert worker_device('cpu', [0]) == 'cpu'


# ----------------------------------------------------------------------------- checkpoints across devices
@contextlib.contextmanager
def saved_as_if_on_a_gpu():
    """``torch.save`` writes every storage as if it lived on ``cuda:0`` (what a GPU machine writes)."""
    import torch.serialization as ser

    orig = ser.location_tag
    ser.location_tag = lambda storage: 'cuda:0'
    try:
        yield
    finally:
        ser.location_tag = orig


@pytest.fixture
def gpu_checkpoint(tmp_path):
    """A DQN checkpoint (weights, Adam state, config) written as a GPU machine writes it."""
    from contexts import OnlineRLContext
    from pipeline.checkpoint import save_checkpoint, to_plain
    from pipeline.policy import DQNPolicy

    cfg = dqn_cfg()
    policy = DQNPolicy(cfg, seed=0)
    policy.learn_mode.update(batch=dqn_batch())
    path = str(tmp_path / 'gpu.pth.tar')
    cfg.policy.device = 'cuda'  # what the GPU run's config said
    with saved_as_if_on_a_gpu():
        save_checkpoint(path, policy, OnlineRLContext(), extra={'config': to_plain(cfg), 'policy_type': 'dqn'})
    if not HAVE_CUDA:  # the file really names a CUDA device: a plain load refuses it here
        with pytest.raises(RuntimeError, match='CUDA'):
            torch.load(path, weights_only=True)
    return path, policy


def test_a_checkpoint_written_on_a_gpu_loads_here_through_every_path(gpu_checkpoint, tmp_path, monkeypatch):
    from middleware import CkptSaver
    from pipeline.run import agents
    from pipeline.policy import DQNPolicy, build_policy_from_checkpoint, load_policy

    path, trained = gpu_checkpoint
    want = {k: v.clone() for k, v in trained.model.state_dict().items()}

    def same(model):
        return all(torch.equal(v, want[k]) and v.device.type == 'cpu' for k, v in model.state_dict().items())

    resumed = DQNPolicy(dqn_cfg(device='cpu'), seed=1)
    CkptSaver(resumed, str(tmp_path / 'run'), resume_from=path)  # --resume
    assert same(resumed.model)
    opt = resumed.learn_mode.optimizer
    assert all(s['exp_avg'].device.type == 'cpu' for s in opt.state.values()) and len(opt.state) > 0
    assert same(build_policy_from_checkpoint(path, 'cpu').model) and same(load_policy(path).model)
    agent = agents.DQN.load(path, device='cpu')  # the agent API
    assert same(agent.policy.model) and agent.cfg.policy.device == 'cpu'
    monkeypatch.chdir(tmp_path)  # --play
    example = __import__('importlib').import_module('examples.dqn_cartpole')
    assert example.main(['--play', path, '--episodes', '1', '--device', 'cpu']) == 0


# ----------------------------------------------------------------------------- the --device flag
@pytest.mark.multiprocess
@no_cuda
def test_device_cuda_on_this_machine_ends_with_one_line(tmp_path, capsys):
    from pipeline.run import example_parser, prepare_run
    from pipeline.run.precheck import UsageError

    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.environ.get('PYTHONPATH', '')]))
    p = subprocess.run([sys.executable, os.path.join(ROOT, 'examples', 'dqn_cartpole.py'), '--device', 'cuda'],
                       capture_output=True, text=True, timeout=60, env=env, cwd=str(tmp_path))
    assert p.returncode == 2 and p.stderr.count('\n') == 1 and 'Traceback' not in p.stderr, p.stderr
    assert p.stderr.startswith('error: --device cuda: ') and 'use cpu' in p.stderr
    assert not os.listdir(tmp_path)  # nothing was started
    for argv in (['--device', 'gpu'], ['--acting-device', 'cuda:0'], ['--set', 'policy.device=cuda:1']):
        with pytest.raises(UsageError) as e:
            prepare_run(example_parser(None, 'exp').parse_args(argv), {}, policy='dqn')
        err = capsys.readouterr().err
        assert e.value.code == 2 and err.count('\n') == 1 and err.startswith('error: ') and 'cpu' in err, err


def test_the_device_flags_set_the_config(tmp_path, monkeypatch):
    from pipeline.run import example_parser, prepare_run

    monkeypatch.chdir(tmp_path)
    args = example_parser(None, 'exp').parse_args(['--device', 'CPU', '--acting-device', 'cpu',
                                                   '--set', 'policy.device=auto'])
    run = prepare_run(args, {'policy': {'discount_factor': 0.9}}, policy='dqn')
    assert run.user_config['policy'] == {'discount_factor': 0.9, 'device': 'cpu', 'acting_device': 'cpu'}


def test_every_example_and_benchmark_that_builds_a_policy_has_the_shared_device_flag():
    builds = re.compile(r'[A-Za-z]Policy\(|[a-z_]+\.main\(|\bDQN\(')
    delegating = {'ppo_mujoco.py', 'ppo_pendulum.py'}  # ppo_cartpole.main's parser (checked by --help tests)
    found = []
    for folder in ('examples', 'benchmarks'):
        for name in sorted(os.listdir(os.path.join(ROOT, folder))):
            if not name.endswith('.py') or name in delegating:
                continue
            with open(os.path.join(ROOT, folder, name)) as f:
                text = f.read()
            if builds.search(text) and "__name__ == '__main__'" in text.replace('"', "'"):
                found.append(name)
                assert 'example_parser(' in text or 'add_device_flags(' in text, f'{folder}/{name} has no --device'
    assert {'dqn_cartpole.py', 'offline_cartpole.py', 'atari100k.py', 'bench_dqn.py'} <= set(found)


# ----------------------------------------------------------------------------- on a GPU
@needs_cuda
def test_on_a_gpu_the_agents_train_with_model_batches_and_optimizer_there(tmp_path):
    from pipeline.run import agents
    from pipeline.learner import Learner

    seen = set()
    orig = Learner._update_minibatch

    def spy(self, mb, rows, env_rows):
        seen.update(v.device.type for b in mb.values() for v in b.values() if isinstance(v, torch.Tensor))
        return orig(self, mb, rows, env_rows)

    Learner._update_minibatch = spy
    try:
        for cls, kw in ((agents.DQN, {'policy': {'learn': {'learning_starts': 64}}}),
                        (agents.PPO, {'policy': {'collect': {'n_steps': 16}}}),
                        (agents.SAC, {'policy': {'learn': {'learning_starts': 64}, 'collect': {'random_collect_size': 64}}})):
            agent = cls(seed=0, config=kw, device='cuda')
            agent.train(max_env_step=256, stop_value=float('inf'))
            learner = agent.policy.learn_mode
            assert all(t.is_cuda for m in agent.policy.networks().values() for t in tensors_of(m))
            assert all(v.is_cuda for opt in learner.optimizers.values() for st in opt.state.values()
                       for k, v in st.items() if k != 'step')
            assert all(v.device.type == 'cpu' for out in learner.last_outputs.values() for v in out.values())
            path = agent.save(str(tmp_path / f'{cls.algo}.pth.tar'))
            assert all(t.device.type == 'cpu' for t in torch.load(path, weights_only=True)['policy']
                       [next(iter(agent.policy.networks()))].values())
            assert cls.load(path, device='cpu').policy.device.type == 'cpu'
    finally:
        Learner._update_minibatch = orig
    assert seen == {'cuda'}
