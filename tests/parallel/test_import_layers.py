"""The modules of ``pipeline.parallel`` import one way: no circle, counting every import of one by another (those
under ``TYPE_CHECKING`` and those inside functions too), so that the bus's parts read bottom-up (the order is in
``zmq_router``'s docstring). Read from the source with ``ast``; nothing is imported here."""
import ast
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PACKAGE = os.path.join(ROOT, 'pipeline', 'parallel')


def package_imports(folder, name='pipeline.parallel'):
    """Module -> the set of modules of the package at ``folder`` (named ``name``) it imports, anywhere in its
    source. An import of a name of the package itself (``from . import X`` where X is no module) is an import of
    ``__init__``."""
    modules = {f[:-3] for f in os.listdir(folder) if f.endswith('.py')}

    def target(dotted):  # 'x.y' below the package -> its module (a submodule of the package) or None
        head = dotted.split('.')[0] if dotted else ''
        return head if head in modules else None

    graph = {}
    for mod in sorted(modules):
        with open(os.path.join(folder, mod + '.py')) as f:
            tree = ast.parse(f.read())
        found = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                if node.level == 1:
                    inner = node.module or ''
                elif node.level == 0 and node.module and (node.module + '.').startswith(name + '.'):
                    inner = node.module[len(name) + 1:]
                else:
                    continue  # another package (``..runtime``, zmq, ...)
                if inner:
                    found.add(target(inner) or '__init__')
                else:
                    found.update(target(a.name) or '__init__' for a in node.names)
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.startswith(name + '.'):
                        found.add(target(a.name[len(name) + 1:]) or '__init__')
        found.discard(mod)
        graph[mod] = found
    return graph


def find_cycle(graph):
    """A list of modules that import each other in a circle (the first repeated at the end), or None."""
    state = {}  # module -> 1 while on the path being walked, 2 once done
    path = []

    def walk(mod):
        state[mod] = 1
        path.append(mod)
        for dep in sorted(graph[mod]):
            if state.get(dep) == 1:
                return path[path.index(dep):] + [dep]
            if dep not in state:
                cycle = walk(dep)
                if cycle:
                    return cycle
        path.pop()
        state[mod] = 2
        return None

    for mod in sorted(graph):
        if mod not in state:
            cycle = walk(mod)
            if cycle:
                return cycle
    return None


def test_the_bus_modules_import_one_way():
    cycle = find_cycle(package_imports(PACKAGE))
    assert cycle is None, 'pipeline/parallel imports in a circle: ' + ' -> '.join(cycle)


def test_the_shared_state_imports_nothing_above_it():
    graph = package_imports(PACKAGE)
    # the peer table, this node's state and the wake-ups import nothing of the bus; the probes only what opens
    # their connections
    assert {m: graph[m] for m in ('peers', 'node_state', 'sleepers', 'waker')} == \
        {'peers': set(), 'node_state': set(), 'sleepers': set(), 'waker': set()}
    assert graph['probes'] == {'connector'}
    # the heartbeat thread drives the other parts: only the router builds it
    assert {m for m, deps in graph.items() if 'heartbeat' in deps} == {'zmq_router'}


def write_package(folder, files):
    os.makedirs(folder)
    for name, text in files.items():
        with open(os.path.join(folder, name + '.py'), 'w') as f:
            f.write(text)


def test_a_circle_through_type_checking_or_a_function_is_found(tmp_path):
    folder = str(tmp_path / 'pkg')
    write_package(folder, {
        '__init__': '',
        'low': 'from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .high import High\n',
        'high': 'def make():\n    from pkg import low\n    return low\n',
        'other': 'import pkg.low\n',
    })
    graph = package_imports(folder, 'pkg')
    assert graph == {'__init__': set(), 'low': {'high'}, 'high': {'low'}, 'other': {'low'}}
    assert find_cycle(graph) == ['high', 'low', 'high']
    del graph['low']
    graph['high'] = set()
    graph['other'] = set()
    assert find_cycle(graph) is None


def test_an_import_of_the_package_itself_counts_as_one_of_its_init(tmp_path):
    folder = str(tmp_path / 'pkg')
    write_package(folder, {'__init__': 'from .part import Part\n', 'part': 'from . import helper_name\n'})
    graph = package_imports(folder, 'pkg')
    assert graph == {'__init__': {'part'}, 'part': {'__init__'}}
    assert find_cycle(graph) == ['__init__', 'part', '__init__']


import pytest  # noqa: E402


@pytest.mark.parametrize('package', ['data', 'learner', 'runtime', 'envs', 'policy', 'offline', 'run'])
def test_the_other_packages_of_the_library_import_one_way_too(package):
    cycle = find_cycle(package_imports(os.path.join(ROOT, 'pipeline', package), 'pipeline.' + package))
    assert cycle is None, f'pipeline/{package} imports in a circle: ' + ' -> '.join(cycle)
