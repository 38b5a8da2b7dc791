"""Functional middleware (factories returning ``fn(ctx)``)."""
from .data_processor import BatchSource, ReplaySource, data_pusher, last_train_output, offpolicy_data_fetcher, uses_per
from .enhancer import NStepAccumulator, nstep_reward_enhancer
from .evaluator import episode_return_bound, evaluate_episodes, interaction_evaluator, run_eval_episodes
from .explorer import eps_greedy_handler
from .logger import online_logger, scalar_means
from .termination_checker import termination_checker
from .trainer import flatten_update_result, trainer

__all__ = [
    'eps_greedy_handler', 'nstep_reward_enhancer', 'NStepAccumulator', 'data_pusher', 'offpolicy_data_fetcher',
    'uses_per', 'interaction_evaluator', 'evaluate_episodes', 'run_eval_episodes', 'episode_return_bound', 'online_logger', 'scalar_means',
    'termination_checker', 'trainer', 'flatten_update_result', 'ReplaySource', 'BatchSource', 'last_train_output',
]
