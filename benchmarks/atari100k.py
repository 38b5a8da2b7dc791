"""Atari-100k: train the DrQ(eps)-style agent on one game for 100k agent steps, evaluate, write a JSON result.

    python benchmarks/atari100k.py --game Pong --seed 0                 # 100k agent steps = 400k frames
    python benchmarks/atari100k.py --game Breakout --seed 1 --steps 20000
    python benchmarks/atari100k.py --game Pong --seed 0 --smoke --out /tmp/res   # a few hundred steps (CI)

Result: ``benchmarks/results/atari100k-drq_eps_narrow/<game>_seed<k>.json`` (``--out`` for another directory): the
config, package versions, machine, wall and process CPU time, the evaluation returns (raw game
scores), the learning curve (raw score of every finished training game vs agent steps) and a SHA-256
of the final weights (two runs of the same command and code on one machine give the same digest) with
a per-tensor fingerprint of what training changed (sum and sum of absolute values of final minus initial
weights: comparable across machines within rounding).
``python benchmarks/report.py`` renders all stored results into docs/benchmarks.md (runs of fewer than
100k agent steps, from ``--steps``, are left out).

Protocol (Kaiser et al. 2019; Dopamine's atari_100k), via ``pipeline.envs.atari.make_atari_env``:
ALE v5 ids with sticky actions off, frame skip 4 with max-pool, 84x84 gray, 4 stacked frames, up
to 30 no-op actions at reset, games capped at 108k frames (ALE's own limit); life loss ends the
episode and rewards are clipped to their sign for training only. Evaluation after training: whole
games with raw scores, eps-greedy with eps 0.001, ``--eval-episodes`` games (10).

Agent (DrQ(eps), Agarwal et al. 2021, built from rlpipe's DQN pieces; :data:`TABLE_AGENT`, the only one
here): one env; one batch-32 update per agent step from step 1,600; 10-step
double-DQN returns, discount 0.99, Huber loss, Adam lr 1e-4 eps 1.5e-4, gradient norm clipped at 10,
target net copied after every update, eps 1.0 until the first update, then linear to 0.01 over 5k
steps, random shifts of +-4 px on obs and next obs of every batch (``pipeline.data.augment.RandomShift``),
a replay buffer holding all 100k transitions (each frame once: ``FrameStorage``). The network is the
Nature-DQN convs (8/4/3, strides 4/2/1) at half width (16/32/32 channels) -> 256 features -> linear
dueling value and advantage branches. A step where the eps draw says "random" runs no network; with
the target copied after every update, the double-DQN target needs one forward pass of the next
observations, not two.

Agents that were tried beside this one (other encoders, a noisy head, another initialisation) are not
here: ``benchmarks/experiments/atari100k_variants.py`` registers them into :data:`AGENTS` and runs this
script with one of them (results under ``benchmarks/experiments/results/``).

Ctrl-C (SIGINT, also sent to a run started in the background, and SIGTERM) saves a checkpoint (weights,
optimizer, replay buffer, counters, random generators, learning curve) next to the result, ``<game>_seed<k>.ckpt``
and ``<game>_seed<k>.buffer``; the same command resumes from it (the interrupted game is not continued: a fresh
game starts). ``--fresh`` ignores a checkpoint. The pair is written as one (``benchmarks/checkpoint_pair.py``: new
files fsynced, then renamed into place, the previous pair kept until then), so a kill during the save leaves the
previous checkpoint; on resume the newest complete pair is used (one line says so when that is not the pair under
the final names), and a damaged or missing file with no complete pair to fall back to stops the run with one line
naming the file and ``--fresh``.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
from typing import Any, Callable, Dict, List, Optional, cast

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from benchmarks import checkpoint_pair, run_facts  # noqa: E402  (after ROOT is on sys.path)

GAMES = ('Boxing', 'Breakout', 'Freeway', 'Pong', 'RoadRunner')
#: Results of ``--agent <agent>`` go to ``RESULTS_DIR + '-<agent>'``.
RESULTS_DIR = os.path.join(ROOT, 'benchmarks', 'results', 'atari100k')

#: The agent of the results table on docs/benchmarks.md, and the default ``--agent``.
TABLE_AGENT = 'drq_eps_narrow'

#: The agents ``--agent`` picks (``benchmarks/experiments/atari100k_variants.py`` adds the lab's); each one's
#: results go to ``<results root>-<agent>/``. The table agent: DrQ(eps)'s settings (Dopamine's DrQ_eps.gin) on
#: the Nature-DQN convs at half width (convs 16/32/32, 256 features), with linear value and advantage branches.
AGENTS: Dict[str, Dict[str, Any]] = {
    TABLE_AGENT: {
        'nstep': 10, 'discount': 0.99, 'batch_size': 32, 'learning_rate': 1e-4, 'adam_eps': 1.5e-4,
        'learning_starts': 1600, 'updates_per_step': 1, 'target_update_freq': 1, 'loss': 'huber',
        'grad_clip': 10.0, 'eps_start': 1.0, 'eps_end': 0.01, 'eps_decay_steps': 5000, 'eval_eps': 0.001,
        'encoder': 'nature', 'dueling': True, 'double_dqn': True, 'shift_pad': 4, 'replay_size': 100_000,
        'encoder_channels': [16, 32, 32], 'feature_dim': 256, 'hidden': 0,
    },
}
#: The name each agent's results carry (field ``agent``).
AGENT_NAMES: Dict[str, str] = {TABLE_AGENT: 'DrQ(eps) on the half-width Nature encoder'}


def build_parser(agents: Optional[List[str]] = None, default_agent: Optional[str] = TABLE_AGENT,
                 results_root: Optional[str] = None, doc: Optional[str] = None,
                 script: str = 'benchmarks/atari100k.py') -> argparse.ArgumentParser:
    """The command line of ``script``: ``--agent`` picks one of ``agents`` (default every agent of :data:`AGENTS`;
    required when ``default_agent`` is None); a run of agent ``a`` writes to ``<results_root>-<a>/`` unless
    ``--out`` (default root :data:`RESULTS_DIR`)."""
    doc = doc or __doc__
    p = argparse.ArgumentParser(description=doc.split('\n')[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=doc)
    p.set_defaults(results_root=results_root or RESULTS_DIR, script=script)
    p.add_argument('--game', default='Pong', help=f'ALE game name ({", ".join(GAMES)} in the benchmark)')
    p.add_argument('--seed', type=int, default=0)
    p.add_argument('--steps', type=int, default=100_000, help='agent steps (4 frames each)')
    p.add_argument('--eval-episodes', type=int, default=10, help='evaluation games after training')
    p.add_argument('--smoke', action='store_true',
                   help='a few hundred steps, learning from step 100, one short evaluation game (CI)')
    p.add_argument('--agent', choices=sorted(agents or AGENTS), default=default_agent, required=default_agent is None,
                   help="the agent's settings" + (f' (default {default_agent}, the table\'s)' if default_agent else ''))
    p.add_argument('--out', default=None, help='directory of the JSON result and the checkpoint '
                                               f'(default {os.path.relpath(results_root or RESULTS_DIR, ROOT)}-<agent>)')
    p.add_argument('--fresh', action='store_true', help='start over even if a checkpoint exists')
    p.add_argument('--threads', type=int, default=1, help='torch threads (1: one core per run)')
    p.add_argument('--no-progress', action='store_true', help='no progress bar')
    p.add_argument('--malloc-default', action='store_true',
                   help="leave glibc's malloc thresholds at their defaults (an A/B of pipeline.cpu_memory)")
    from pipeline.run import add_device_flags  # no torch

    add_device_flags(p)
    return p


def agent_settings(args: argparse.Namespace) -> Dict[str, Any]:
    """The agent settings of this run (``AGENTS[args.agent]``, shrunk for ``--smoke``)."""
    a = dict(AGENTS[getattr(args, 'agent', TABLE_AGENT)])
    if args.smoke:
        a.update(learning_starts=100, eps_decay_steps=200)
        if a.get('reset_every'):
            a['reset_every'] = 100  # a smoke run passes a reset
    return a


def dqn_config(a: Dict[str, Any], seed: int) -> Any:
    """An rlpipe DQN config (``pipeline.config.compile_config``) with the agent settings ``a``."""
    from pipeline.config import compile_config

    user = {
        'seed': seed,
        'policy': {
            'discount_factor': a['discount'], 'nstep': a['nstep'],
            'learn': {'update_per_collect': a['updates_per_step'], 'batch_size': a['batch_size'],
                      'learning_rate': a['learning_rate'], 'optimizer': 'adam',
                      'optimizer_kwargs': {'eps': a['adam_eps']}, 'double_dqn': a['double_dqn'],
                      'loss': a['loss'], 'target_update_type': 'hard', 'target_update_freq': a['target_update_freq'],
                      'grad_clip': a['grad_clip'], 'truncation_as_terminal': False,
                      'learning_starts': a['learning_starts']},
            'collect': {'n_sample': 1},
            'other': {'replay_buffer': {'replay_buffer_size': a['replay_size']},
                      # ez-greedy when the agent sets it (None: plain eps-greedy)
                      'eps': {'repeat_exponent': a.get('eps_repeat_exponent'),
                              'repeat_max': a.get('eps_repeat_max', 100),
                              'repeat_min_eps': a.get('eps_repeat_min_eps', 0.0)}},
        },
    }
    return compile_config(user, policy='dqn')


def q_network(a: Dict[str, Any], n_actions: int) -> Any:
    """The agent's Q-network (``pipeline.policy.conv.AtariQNetwork``) for the settings ``a``."""
    from pipeline.policy.conv import AtariQNetwork

    return AtariQNetwork(n_actions, dueling=a['dueling'], encoder=a['encoder'], noisy_std=a.get('noisy_std'),
                         **{k: a[k] for k in ('feature_dim', 'hidden', 'encoder_channels', 'init', 'padding', 'channels_last',
                                                      'bfloat16')
                            if k in a})


def make_envs(game: str, seed: int, smoke: bool) -> Any:
    """(training env, evaluation env): ``EnvManager``s of one ``ALE/<game>-v5`` env each."""
    from pipeline.envs import EnvManager
    from pipeline.envs.atari import AtariEnvFn

    env_id = f'ALE/{game}-v5'
    extra = {'max_num_frames_per_episode': 2000} if smoke else {}  # smoke: short evaluation games
    train = EnvManager([AtariEnvFn(env_id, training=True)], seed=seed)
    evaluate = EnvManager([AtariEnvFn(env_id, training=False, **extra)], seed=seed + 10_000)
    return train, evaluate


def eps_after_warmup(start: float, end: float, decay: int, warmup: int) -> Any:
    """Middleware setting ``ctx.collect_kwargs['eps']``: ``start`` for the first ``warmup`` agent steps
    (no update happens before them), then linear to ``end`` over ``decay`` steps (Dopamine's schedule
    for DrQ(eps))."""

    def _eps(ctx: Any) -> None:
        frac = min(max(ctx.env_step - warmup, 0) / decay, 1.0)
        ctx.collect_kwargs['eps'] = start + (end - start) * frac

    return _eps


class CurveRecorder:
    """Middleware: appends ``[env_step, raw score]`` for every training game that ended this step
    (``ctx.info_for_logging['collect_score']``), ``[env_step, cpu_so_far()]`` to ``cpu_points`` at every multiple
    of ``cpu_every`` agent steps (where a run's time goes: early or late), and moves a progress bar."""

    def __init__(self, curve: List[List[float]], total: int, start: int, show: bool, mark: int = 0,
                 cpu_points: Optional[List[List[float]]] = None, cpu_every: int = 10_000,
                 cpu_so_far: Callable[[], float] = time.process_time) -> None:
        self.curve = curve
        self.cpu_points = cpu_points if cpu_points is not None else []
        self.cpu_every = int(cpu_every)
        self.cpu_so_far = cpu_so_far
        self.total = total
        self.mark = mark  # agent step at which the update phase starts: its wall/CPU clock is read there
        self.marked: Optional[tuple] = None
        self._bar = None
        if show:
            try:
                from tqdm import tqdm
                self._bar = tqdm(total=total, initial=start, unit='step', smoothing=0.05, dynamic_ncols=True)
            except ImportError:
                self._bar = None
        self._last = start

    def __call__(self, ctx: Any) -> None:
        if self.marked is None and ctx.env_step >= self.mark:
            self.marked = (int(ctx.env_step), time.perf_counter(), time.process_time())
        if ctx.env_step % self.cpu_every == 0 and (not self.cpu_points or self.cpu_points[-1][0] < ctx.env_step):
            self.cpu_points.append([int(ctx.env_step), self.cpu_so_far()])
        scores = ctx.info_for_logging.get('collect_score')
        if scores:
            for s in scores:
                self.curve.append([int(ctx.env_step), float(s)])
            if self._bar is not None:
                recent = [c[1] for c in self.curve[-10:]]
                self._bar.set_postfix(games=len(self.curve), score10=f'{sum(recent) / len(recent):.1f}')
        if self._bar is not None and ctx.env_step - self._last >= 100:
            self._bar.update(ctx.env_step - self._last)
            self._last = ctx.env_step

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


def _phase(marked: Optional[tuple], end_step: int, t_end: float, c_end: float) -> Optional[Dict[str, float]]:
    """Agent steps/s and CPU per agent step from the first update (or, in a resumed run, from the
    resume point) to the end of training in this process; None when no update phase ran."""
    if marked is None or end_step <= marked[0]:
        return None
    n = end_step - marked[0]
    return {'from_step': marked[0], 'steps': n, 'wall_s': t_end - marked[1], 'cpu_s': c_end - marked[2],
            'steps_per_s': n / (t_end - marked[1]), 'cpu_ms_per_step': 1000 * (c_end - marked[2]) / n}


def run(args: argparse.Namespace) -> Dict[str, Any]:
    """Train, evaluate and write the result; returns it (or a dict with ``interrupted`` after Ctrl-C)."""
    import numpy as np
    import torch

    from contexts import OnlineRLContext
    from middleware import OffPolicyLearner, StepCollector, data_pusher, nstep_reward_enhancer, termination_checker
    from middleware.reset import PeriodicReset
    from middleware.functional import run_eval_episodes
    from pipeline import task
    from pipeline.cpu_memory import retain_freed_memory
    from pipeline.data import DequeBuffer
    from pipeline.data.augment import Chain, RandomIntensity, RandomShift
    from pipeline.data.frame_storage import FrameStorage
    from pipeline.policy import DQNPolicy
    from pipeline.policy.dqn import DQNCollectMode
    from pipeline.policy.noisy import noise_off

    versions, load_at_start = run_facts.versions(('torch', 'numpy', 'gymnasium', 'ale_py', 'cv2')), run_facts.load_average()
    torch.set_num_threads(args.threads)
    # denormal floats as zero for this run (main() restores the default): Adam's first moment of a weight whose
    # gradient stays 0 decays to a few denormal units and stays there (0.9 x 4 units rounds back to 4), and
    # arithmetic on denormals is slow on the CPU; the weights' updates are the same
    flush_denormal = bool(torch.set_flush_denormal(True))
    # freed tensors' memory stays in the process for the next update, not unmapped and faulted in again
    retained = False if args.malloc_default else retain_freed_memory()
    steps = 400 if args.smoke and args.steps == 100_000 else args.steps
    a = agent_settings(args)
    cfg = dqn_config(a, args.seed)
    out = args.out or f"{getattr(args, 'results_root', RESULTS_DIR)}-{args.agent}"
    os.makedirs(out, exist_ok=True)
    stem = os.path.join(out, f'{args.game}_seed{args.seed}')
    ckpt_path, _ = checkpoint_pair.paths(stem)
    # the newest complete checkpoint, before anything is built: a damaged one stops the run with one line
    pair = None if args.fresh else checkpoint_pair.find_pair(stem)
    if pair is not None:
        if pair.note:
            print(pair.note, file=sys.stderr, flush=True)
        if pair.state.get('agent') != a or pair.state.get('steps') != steps:
            raise SystemExit(f'{pair.ckpt} is a checkpoint of other settings; pass --fresh to start over')

    train_env, eval_env = make_envs(args.game, args.seed, args.smoke)
    n_actions = int(train_env.action_space.n)
    torch.manual_seed(args.seed)
    model = q_network(a, n_actions)
    initial = {k: v.detach().clone() for k, v in model.state_dict().items()}
    policy = DQNPolicy(cfg, model=model, seed=args.seed, device=args.device)
    buffer_ = DequeBuffer(a['replay_size'], seed=args.seed, storage=FrameStorage(a['replay_size'], seed=args.seed))
    shift = RandomShift(a['shift_pad'], seed=args.seed)
    # an intensity change after the shift when the agent sets one (its own generator: draws apart from the shift's)
    intensity = RandomIntensity(a['intensity_scale'], seed=args.seed + 1) if a.get('intensity_scale') else None
    augment = Chain(shift, intensity) if intensity is not None else shift
    learner = policy.learn_mode
    collect = policy.collect_mode
    # resets against the primacy bias when the agent sets them: its named layers every `reset_every` updates
    resetter = (PeriodicReset([getattr(model, n) for n in a['reset_layers']], learner.optimizer, a['reset_every'])
                if a.get('reset_every') else None)
    ctx = OnlineRLContext()
    curve: List[List[float]] = []
    cpu_points: List[List[float]] = []  # [agent step, training CPU seconds so far] every 10k steps
    wall0, cpu0 = 0.0, 0.0
    if pair is not None:
        state = pair.state
        try:
            policy.load_state_dict(state['policy'])
            ctx.env_step, ctx.train_iter, ctx.env_episode = state['env_step'], state['train_iter'], state['env_episode']
            collect.rng.bit_generator.state = state['collect_rng']
            if 'collect_hold' in state:  # ez-greedy's held actions
                left, held = state['collect_hold']
                collect.hold = (np.asarray(left, dtype=np.int64), np.asarray(held, dtype=np.int64))
            shift.load_state_dict(state['shift'])
            if intensity is not None:
                intensity.load_state_dict(state['intensity'])
            if resetter is not None:
                resetter.load_state_dict(state['resets'])
            torch.set_rng_state(state['torch_rng'])
            curve, wall0, cpu0 = state['curve'], state['wall'], state['cpu']
            cpu_points = state.get('cpu_points', [])
        except Exception as e:  # noqa: BLE001  (one line naming the file, not a traceback)
            raise SystemExit(f'error: {pair.ckpt} does not fit this run ({type(e).__name__}: '
                             f'{str(e).splitlines()[0][:200] if str(e) else ""}); rerun with --fresh to start over')
        try:
            buffer_.load_data(pair.buffer)
        except Exception as e:  # noqa: BLE001
            raise SystemExit(f'error: {pair.buffer} is damaged (it does not load: {type(e).__name__}); '
                             'rerun with --fresh to start over')
        checkpoint_pair.settle(stem, pair)  # the resumed pair under the final names, leftovers removed
        train_env.seed(args.seed + 1 + ctx.env_step)  # a fresh game, not a replay of the first one
        print(f'resumed from {ckpt_path} at agent step {ctx.env_step}', flush=True)

    t_wall, t_cpu = time.perf_counter(), time.process_time()
    recorder = CurveRecorder(curve, steps, ctx.env_step, show=not args.no_progress, mark=a['learning_starts'],
                             cpu_points=cpu_points, cpu_every=100 if args.smoke else 10_000,
                             cpu_so_far=lambda: cpu0 + time.process_time() - t_cpu)  # across resumes
    interrupted = False
    try:
        with task.start(ctx=ctx):
            task.use(eps_after_warmup(a['eps_start'], a['eps_end'], a['eps_decay_steps'], a['learning_starts']))
            task.use(StepCollector(cfg, collect, train_env))
            task.use(nstep_reward_enhancer(cfg))
            task.use(data_pusher(cfg, buffer_))
            task.use(OffPolicyLearner(cfg, learner, buffer_, batch_transform=augment, log_freq=0))
            if resetter is not None:
                task.use(resetter)
            task.use(recorder)
            task.use(termination_checker(max_env_step=steps))
            if ctx.env_step < steps:
                task.run()
            ctx = cast(OnlineRLContext, task.ctx)  # the context started above, renewed step by step
    except KeyboardInterrupt:
        interrupted = True
        ctx = cast(OnlineRLContext, task.ctx)
    recorder.close()
    t_end, c_end = time.perf_counter(), time.process_time()
    wall = wall0 + t_end - t_wall
    cpu = cpu0 + c_end - t_cpu
    if interrupted:
        state = {'agent': a, 'steps': steps, 'policy': policy.state_dict(), 'env_step': ctx.env_step,
                 'train_iter': ctx.train_iter, 'env_episode': ctx.env_episode,
                 'collect_rng': collect.rng.bit_generator.state,
                 'collect_hold': [h.tolist() for h in collect.hold], 'shift': shift.state_dict(),
                 'intensity': intensity.state_dict() if intensity is not None else None,
                 'resets': resetter.state_dict() if resetter is not None else None,
                 'torch_rng': torch.get_rng_state(), 'curve': curve, 'cpu_points': cpu_points, 'wall': wall,
                 'cpu': cpu}
        saved: Optional[str] = None
        try:
            saved = checkpoint_pair.save_pair(stem, state, buffer_.save_data)
            print(f'\ninterrupted at agent step {ctx.env_step}: saved {ckpt_path}\n'
                  f'resume with: {resume_command(args)}', flush=True)
        except (KeyboardInterrupt, OSError) as e:  # a second signal, a full disk: the previous save is kept
            why = 'interrupted again' if isinstance(e, KeyboardInterrupt) else (e.strerror or type(e).__name__)
            print(f'\ninterrupted at agent step {ctx.env_step}; saving the checkpoint failed ({why}): the same '
                  'command resumes from the newest complete checkpoint, if there is one', file=sys.stderr, flush=True)
        train_env.close()
        eval_env.close()
        return {'interrupted': True, 'checkpoint': saved}

    eval_actor = DQNCollectMode(model, n_actions, seed=args.seed + 20_000)
    eval_episodes = 1 if args.smoke else args.eval_episodes
    t_eval = time.perf_counter()
    with noise_off(model):  # a noisy head evaluates on its mean weights (no-op without one)
        ev = run_eval_episodes(lambda obs: eval_actor.forward(obs, a['eval_eps']), eval_env, eval_episodes)
    eval_wall = time.perf_counter() - t_eval
    train_env.close()
    eval_env.close()
    returns = [float(r) for r in ev.returns]
    fingerprint = []
    for name, t in model.state_dict().items():
        step = (t.detach().cpu().double() - initial[name].double()).numpy()
        fingerprint.append([name, float(step.sum()), float(np.abs(step).sum())])
    result = {
        'benchmark': 'atari100k', 'game': args.game, 'env_id': f'ALE/{args.game}-v5', 'seed': args.seed,
        'agent': AGENT_NAMES[args.agent], 'agent_preset': args.agent, 'settings': a, 'agent_steps': int(ctx.env_step), 'frames': int(ctx.env_step) * 4,
        'updates': int(ctx.train_iter), 'resets': resetter.resets if resetter is not None else 0,
        'smoke': bool(args.smoke), 'torch_threads': args.threads, 'flush_denormal': flush_denormal,
        'retain_freed_memory': retained,
        'device': str(policy.device),
        'weights_sha256': run_facts.weights_sha256(model.state_dict().values()), 'weights_fingerprint': fingerprint,
        'eval': {'episodes': len(returns), 'epsilon': a['eval_eps'], 'returns': returns,
                 'mean': float(np.mean(returns)), 'lengths': [int(x) for x in ev.lengths], 'wall_s': eval_wall},
        'curve': {'x': 'agent_steps', 'y': 'raw game score of finished training games', 'points': curve},
        'wall_s': wall, 'cpu_s': cpu, 'train_steps_per_s': ctx.env_step / wall if wall > 0 else None,
        'update_phase': _phase(recorder.marked, int(ctx.env_step), t_end, c_end),
        'cpu_curve': {'x': 'agent_steps', 'y': 'CPU seconds of training so far', 'points': cpu_points},
        'versions': versions, 'machine': run_facts.machine(load_at_start),
        'finished_utc': time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime()),
    }
    with open(stem + '.json', 'w') as f:
        json.dump(result, f, indent=1)
    checkpoint_pair.remove_pair(stem)
    print(f'{args.game} seed {args.seed}: {ctx.env_step} agent steps, {ctx.train_iter} updates in {wall:.0f} s '
          f'(CPU {cpu:.0f} s); evaluation over {len(returns)} games: mean score {result["eval"]["mean"]:.1f}; '
          f'wrote {stem}.json', flush=True)
    return result


def resume_command(args: argparse.Namespace) -> str:
    """The command that resumes the run ``args`` (parsed by :func:`build_parser`): its script and its command
    line (``args.argv``, from :func:`main`) without ``--fresh``, which would start over."""
    words = [w for w in getattr(args, 'argv', sys.argv[1:]) if w != '--fresh']
    return ' '.join(['python', args.script, shlex.join(words)]).rstrip()


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f'signal {signum}')


def main(argv: Optional[List[str]] = None, parser: Optional[argparse.ArgumentParser] = None) -> int:
    """Run the command line ``argv`` (``parser``: another command line, e.g. the lab's variants); 130 after
    Ctrl-C, with a checkpoint saved."""
    import signal
    import threading

    args = (parser or build_parser()).parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    saved = {}
    if threading.current_thread() is threading.main_thread():
        # a job started with `&` inherits SIGINT ignored, and `kill` sends SIGTERM: both save a checkpoint
        for sig in (signal.SIGINT, signal.SIGTERM):
            saved[sig] = signal.signal(sig, _interrupt)
    try:
        result = run(args)
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
        if 'torch' in sys.modules:
            sys.modules['torch'].set_flush_denormal(False)  # torch's default, which run() changed
    return 130 if result.get('interrupted') else 0


if __name__ == '__main__':
    sys.exit(main())
