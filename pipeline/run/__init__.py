"""Running experiments from the command line: what every training example shares.

The examples' flags (:mod:`.flags`), the run they prepare (:mod:`.prepare`: ``--set``, ``--resume``, ``--play``,
``--middleware``, the run folder of :mod:`.folders`), running the pipeline to its end or to Ctrl-C
(:mod:`.script`), the terminal's log and summary lines (:mod:`.console`) and playing a saved policy
(:mod:`.play`) are importable from here::

    from pipeline.run import example_parser, prepare_run, run_pipeline, run_script

The rest, imported from their modules: :mod:`.atari_mujoco` (what the Atari and MuJoCo examples share),
:mod:`.recipes` and :mod:`.offline_recipe` (the pipelines the examples and the agents build), :mod:`.agents`
(train, save, load and run a policy from Python), :mod:`.precheck` (config and env checks before torch loads),
:mod:`.resume` (where a restarted node resumes from), :mod:`.record` (``RunRecorder``) and :mod:`.describe`
(``rlpipe describe``). This room sits on top of the middleware; importing ``pipeline.run`` loads neither torch
nor gymnasium, so ``--help`` answers at once.
"""
from .console import node_print, setup_logging
from .flags import add_device_flags, device_argv, device_overrides, example_parser
from .folders import check_checkpoint_path, new_run_dir
from .play import play_policy, play_without_rendering
from .prepare import RunInfo, apply_overrides, load_middleware_factory, prepare_run, resume_command
from .script import run_pipeline, run_script

__all__ = ['example_parser', 'add_device_flags', 'device_overrides', 'device_argv', 'prepare_run', 'RunInfo',
           'apply_overrides', 'new_run_dir', 'load_middleware_factory', 'resume_command', 'check_checkpoint_path',
           'setup_logging', 'play_policy', 'play_without_rendering', 'run_pipeline', 'run_script', 'node_print']
