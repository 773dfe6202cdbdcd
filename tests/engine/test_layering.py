"""The layering rules docs/ARCHITECTURE.md states, checked on the engine's source."""

import ast
from pathlib import Path

import newsmotion_engine

ENGINE = Path(newsmotion_engine.__file__).parent


def _modules():
    return sorted(ENGINE.rglob("*.py"))


def _imported(tree: ast.AST) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_engine_never_imports_dagster():
    offenders = [str(p.relative_to(ENGINE)) for p in _modules() if "dagster" in _imported(ast.parse(p.read_text()))]
    assert offenders == []


def test_only_storage_module_reads_the_storage_variable():
    # The edges pick the root through Storage.from_env(); nothing else in the engine may read it.
    readers = [str(p.relative_to(ENGINE)) for p in _modules() if "STORAGE_ENV" in p.read_text()
               or any("environ" in line and "NEWSMOTION_STORAGE" in line for line in p.read_text().splitlines())]
    assert readers == ["storage.py"]


def _top_level_imports(tree: ast.Module) -> set[str]:
    return _imported(ast.Module(body=[n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))], type_ignores=[]))


def test_dagster_pipes_only_in_the_entry_point_and_only_lazily():
    # dagster_pipes (Pipes' small external-side package, no Dagster) is allowed in the one module
    # Dagster starts as an engine process, imported inside the function that opens the Pipes
    # context, so the engine, that module included, imports without it.
    trees = {str(p.relative_to(ENGINE)): ast.parse(p.read_text()) for p in _modules()}
    assert [name for name, tree in trees.items() if "dagster_pipes" in _imported(tree)] == ["pipes.py"]
    assert "dagster_pipes" not in _top_level_imports(trees["pipes.py"])


def _imported_modules(tree: ast.AST) -> set[str]:
    """Full dotted names of the modules ``tree`` imports (``from a import b`` counts as ``a.b``)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def test_a_backend_package_imports_no_other_backend_only_the_shared_wan_layer():
    # Each backend is one package under render/backends/; the Wan backends share render/backends/wan/,
    # which imports none of them.
    root = ENGINE / "render" / "backends"
    packages = sorted(p.name for p in root.iterdir() if (p / "__init__.py").is_file())
    assert {"wan", "warp", "wan_animate", "wan_animate_2"} <= set(packages)
    offenders = []
    for package in packages:
        allowed = {package} if package == "wan" else {package, "wan"}
        for path in (root / package).rglob("*.py"):
            for name in _imported_modules(ast.parse(path.read_text())):
                parts = name.split(".")
                if parts[:3] == ["newsmotion_engine", "render", "backends"] and len(parts) > 3 and parts[3] in packages \
                        and parts[3] not in allowed:  # fmt: skip
                    offenders.append(f"{path.relative_to(root)} imports {name}")
    assert offenders == []


def test_installed_packages_never_import_the_lab_harness():
    # benchmarks/ is not installed: the engine and the Dagster code may not depend on it.
    import newsmotion_assets

    roots = (ENGINE, Path(newsmotion_assets.__file__).parent)
    offenders = [str(p) for root in roots for p in sorted(root.rglob("*.py")) if "benchmarks" in _imported(ast.parse(p.read_text()))]
    assert offenders == []
