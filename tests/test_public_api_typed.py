"""Every public function and method of the library (``pipeline``, ``middleware``, ``contexts``) has type hints on
its parameters and its return (``__init__`` only on its parameters): read from the source, so a new untyped
public function fails here with its place."""
import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGES = ('pipeline', 'middleware', 'contexts')


def _untyped(tree: ast.Module, path: str):
    def visit(body, owner):
        for node in body:
            if isinstance(node, ast.ClassDef) and not node.name.startswith('_'):
                yield from visit(node.body, owner + node.name + '.')
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if node.name.startswith('_') and node.name != '__init__':
                    continue
                args = node.args.posonlyargs + node.args.args + node.args.kwonlyargs
                missing = [a.arg for a in args if a.annotation is None and a.arg not in ('self', 'cls')]
                missing += [f'*{a.arg}' for a in (node.args.vararg, node.args.kwarg) if a is not None and a.annotation is None]
                if node.returns is None and node.name != '__init__':
                    missing.append('return')
                if missing:
                    yield f'{path}:{node.lineno} {owner}{node.name}: {", ".join(missing)}'

    yield from visit(tree.body, '')


def test_every_public_function_and_method_is_typed():
    found = []
    for pkg in PACKAGES:
        for p in sorted((ROOT / pkg).rglob('*.py')):
            found += _untyped(ast.parse(p.read_text()), str(p.relative_to(ROOT)))
    assert not found, 'public functions without type hints:\n' + '\n'.join(found)


def _lazy_names(tree: ast.Module):
    """(names a module-level ``__getattr__`` serves, names imported under ``if TYPE_CHECKING:``)."""
    served, typed = set(), set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == '__getattr__':
            for sub in ast.walk(node):
                if isinstance(sub, ast.Compare):
                    for c in ast.walk(sub):
                        if isinstance(c, ast.Constant) and isinstance(c.value, str):
                            served.add(c.value)
        elif isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == 'TYPE_CHECKING':
            for sub in node.body:
                if isinstance(sub, ast.ImportFrom):
                    typed.update(a.asname or a.name for a in sub.names)
    return served, typed


def test_names_a_package_loads_lazily_have_their_types():
    # A module-level __getattr__ makes mypy read every name it cannot find there as Any: without the
    # TYPE_CHECKING import beside it, `from middleware import RolloutExchanger` (or a misspelt name) type-checks
    # as anything, and so does every call made with it.
    found = []
    for pkg in PACKAGES:
        for p in sorted((ROOT / pkg).rglob('__init__.py')):
            served, typed = _lazy_names(ast.parse(p.read_text()))
            found += [f'{p.relative_to(ROOT)}: {name}' for name in sorted(served - typed)]
    assert not found, ('names served by __getattr__ without an import under `if TYPE_CHECKING:`:\n'
                       + '\n'.join(found))
