"""How pipeline.envs is laid out (issue 25): backends satisfy the EnvBackend protocol, the modules import each
other without a cycle (lazy imports inside functions count), none is over 450 lines, and the public names stay
where users import them."""
import ast
import inspect
import os

import numpy as np
import pytest

import pipeline
from pipeline.envs.backend_protocol import EnvBackend
from pipeline.envs.envpool_backend import EnvPoolBackend
from pipeline.envs.hybrid_backend import HybridBackend
from pipeline.envs.subprocess_backend import SubprocessBackend
from pipeline.envs.sync_backend import SyncBackend

PKG = os.path.dirname(pipeline.__file__)
BACKEND_CLASSES = [SyncBackend, SubprocessBackend, HybridBackend, EnvPoolBackend]
PROTOCOL_METHODS = ('reset', 'step', 'step_async', 'step_wait', 'close')


@pytest.mark.parametrize('cls', BACKEND_CLASSES, ids=lambda c: c.__name__)
def test_every_backend_class_satisfies_the_protocol(cls):
    assert issubclass(cls, EnvBackend)
    for name in PROTOCOL_METHODS:
        want = list(inspect.signature(getattr(EnvBackend, name)).parameters)
        got = list(inspect.signature(getattr(cls, name)).parameters)
        assert got == want, f'{cls.__name__}.{name}{got} does not match EnvBackend.{name}{want}'


def test_the_managers_backend_is_an_env_backend():
    from pipeline.envs import EnvManager

    with EnvManager('CartPole-v1', 2, seed=0) as mgr:
        assert isinstance(mgr._backend, EnvBackend) and isinstance(mgr._backend, SyncBackend)
        mgr.reset()
        mgr.step(np.zeros(2, np.int64))
    assert not isinstance(object(), EnvBackend)


def _imports(path, package):
    """Modules of ``package`` that the module at ``path`` imports, anywhere in it (also inside functions)."""
    tree = ast.parse(open(path).read())
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level == 1:
                base = node.module.split('.')[0] if node.module else None
                if base is not None:
                    out.add(base)
                else:
                    out.update(a.name for a in node.names)
            elif node.level == 0 and node.module and node.module.startswith(package + '.'):
                out.add(node.module[len(package) + 1:].split('.')[0])
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith(package + '.'):
                    out.add(a.name[len(package) + 1:].split('.')[0])
    return out


def test_no_import_cycle_in_pipeline_envs():
    folder = os.path.join(PKG, 'envs')
    mods = {f[:-3] for f in os.listdir(folder) if f.endswith('.py') and f != '__init__.py'}
    graph = {m: _imports(os.path.join(folder, m + '.py'), 'pipeline.envs') & mods for m in mods}
    done, path = set(), []

    def visit(m):
        if m in path:
            raise AssertionError('import cycle in pipeline/envs: ' + ' -> '.join(path[path.index(m):] + [m]))
        if m in done:
            return
        path.append(m)
        for n in sorted(graph[m]):
            visit(n)
        path.pop()
        done.add(m)

    for m in sorted(mods):
        visit(m)
    assert graph['env_manager'] and not graph['errors']  # the graph was read


def test_public_names_stay_importable_where_they_were():
    import pipeline.envs as envs
    import pipeline.envs.env_manager as env_manager
    import pipeline.envs.mujoco as mujoco
    import pipeline.envs.subprocess_backend as subprocess_backend

    for name in envs.__all__:
        assert getattr(envs, name) is getattr(env_manager, name)
    assert callable(mujoco.log_mujoco_warnings) and callable(mujoco.make_mujoco_env)
    assert subprocess_backend.EnvWorkerError is envs.EnvWorkerError
    assert issubclass(envs.UnknownEnvError, ValueError)
