"""The rooms import downwards only (issue 25): the runtime, the data, the learners, policies, envs, the bus, the
config and the checkpoint files below the middleware; the run tooling (``pipeline.run``) on top. Read from the
source (every import, the lazy ones inside functions too), so nothing is imported here."""
import ast
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))



def imports():
    """(importing module, imported module) for every import in pipeline/, middleware/ and contexts/."""
    for top in ('pipeline', 'middleware', 'contexts'):
        for folder, _, files in os.walk(os.path.join(ROOT, top)):
            for name in sorted(files):
                if not name.endswith('.py'):
                    continue
                path = os.path.join(folder, name)
                mod = os.path.relpath(path, ROOT)[:-3].replace(os.sep, '.')
                package = mod[:-len('.__init__')] if mod.endswith('.__init__') else mod.rpartition('.')[0]
                mod = mod[:-len('.__init__')] if mod.endswith('.__init__') else mod
                with open(path) as f:
                    tree = ast.parse(f.read())
                for node in ast.walk(tree):
                    if isinstance(node, ast.Import):
                        for alias in node.names:
                            yield mod, alias.name
                    elif isinstance(node, ast.ImportFrom):
                        if node.level:
                            base = package.split('.')[:len(package.split('.')) - node.level + 1]
                            target = '.'.join(base + ([node.module] if node.module else []))
                        else:
                            target = node.module
                        yield mod, target
                        for alias in node.names:
                            yield mod, f'{target}.{alias.name}'


def is_under(mod, room):
    return mod == room or mod.startswith(room + '.')


def test_nothing_below_the_middleware_imports_it_or_the_run_tooling():
    bad = sorted({f'{a} imports {b}' for a, b in imports()
                  if not is_under(a, 'middleware') and not is_under(a, 'pipeline.run')
                  and (is_under(b, 'middleware') or is_under(b, 'pipeline.run'))})
    assert bad == [], bad


def test_the_middleware_does_not_import_the_run_tooling():
    bad = sorted({f'{a} imports {b}' for a, b in imports()
                  if is_under(a, 'middleware') and is_under(b, 'pipeline.run')})
    assert bad == [], bad


def test_the_runtime_imports_no_other_room():
    bad = sorted({f'{a} imports {b}' for a, b in imports()
                  if is_under(a, 'pipeline.runtime') and is_under(b, 'pipeline') and not is_under(b, 'pipeline.runtime')
                  and b != 'pipeline'})
    assert bad == [], bad


#: the most lines one class of the library may span (issue 46: a file may be longer when it is one thing read top
#: to bottom; a class is one thing a reader holds in mind)
MAX_CLASS_LINES = 420


def test_no_class_is_over_about_400_lines():
    long = []
    for top in ('pipeline', 'middleware', 'contexts'):
        for folder, _, files in os.walk(os.path.join(ROOT, top)):
            for name in sorted(files):
                if name.endswith('.py'):
                    path = os.path.join(folder, name)
                    with open(path) as f:
                        tree = ast.parse(f.read())
                    long += [f'{os.path.relpath(path, ROOT)}: {node.name} ({node.end_lineno - node.lineno + 1} lines)'
                             for node in ast.walk(tree) if isinstance(node, ast.ClassDef)
                             and node.end_lineno - node.lineno + 1 > MAX_CLASS_LINES]
    assert long == [], long


def test_no_class_is_assembled_from_mixin_bases():
    """A class owns its state in one file and holds its collaborators (issue 46): no class of the library
    derives from a class named like a mixin, and the bus and the learner derive from nothing of their own."""
    mixins = []
    for top in ('pipeline', 'middleware', 'contexts'):
        for folder, _, files in os.walk(os.path.join(ROOT, top)):
            for name in sorted(files):
                if name.endswith('.py'):
                    with open(os.path.join(folder, name)) as f:
                        tree = ast.parse(f.read())
                    for node in ast.walk(tree):
                        if isinstance(node, ast.ClassDef):
                            bases = [ast.unparse(b) for b in node.bases]
                            mixins += [f'{name}: {node.name}({b})' for b in bases if 'Mixin' in b]
    assert mixins == [], mixins
    from pipeline.learner import Learner
    from pipeline.parallel.zmq_router import ZmqRouter
    from pipeline.runtime.router import Router

    assert Learner.__bases__ == (object,) and ZmqRouter.__bases__ == (Router,)
