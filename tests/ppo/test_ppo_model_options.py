"""PPO's model options: hidden activation and orthogonal init (RL-Zoo's MuJoCo settings use ReLU, no ortho init)."""
import gymnasium as gym
import torch
from torch import nn

from pipeline.config import compile_config
from pipeline.policy.ppo import PPOPolicy
from pipeline.policy.ppo_model import ActorCritic


def test_ortho_init_off_keeps_torch_default_init():
    torch.manual_seed(0)
    ortho = ActorCritic(11, 3, continuous=True, hidden=(256, 256))
    torch.manual_seed(0)
    plain = ActorCritic(11, 3, continuous=True, hidden=(256, 256), activation=nn.ReLU, ortho_init=False)
    # the orthogonal init scales the policy head by 0.01 and zeroes biases; torch's default does neither
    assert ortho.pi_head.weight.abs().max() < 0.05 and float(ortho.pi_body[0].bias.detach().abs().sum()) == 0.0
    assert plain.pi_head.weight.abs().max() > 0.02 and float(plain.pi_body[0].bias.detach().abs().sum()) > 0.0
    assert isinstance(plain.pi_body[1], nn.ReLU) and isinstance(ortho.pi_body[1], nn.Tanh)


def test_config_selects_activation_and_init():
    env = gym.make('Pendulum-v1')
    cfg = compile_config({'policy': {'model': {'activation': 'relu', 'ortho_init': False}}}, policy='ppo')
    p = PPOPolicy(cfg.policy, env.observation_space, env.action_space, seed=0)
    assert isinstance(p.model.v_body[1], nn.ReLU) and float(p.model.v_head.bias.detach().abs().sum()) > 0.0
    default = PPOPolicy(compile_config({}, policy='ppo').policy, env.observation_space, env.action_space, seed=0)
    assert isinstance(default.model.v_body[1], nn.Tanh) and float(default.model.v_head.bias.detach().abs().sum()) == 0.0
