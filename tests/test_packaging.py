"""The distribution: one import package, `parley`, in a built wheel and beside the OpenAI Agents SDK.

These run Python in a clean working directory: from the repository root the folders themselves
(``agents/``, ``runtime/`` …) would be importable under their bare names and hide the question.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

from tests.conftest import require

ROOT = Path(__file__).resolve().parents[1]
SUBPACKAGES = ("runtime", "agents", "environments", "bus", "memory", "observability")


def pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def run_python(code: str, cwd: Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_every_package_folder_is_listed_and_mapped() -> None:
    setuptools = pyproject()["tool"]["setuptools"]
    listed = set(setuptools["packages"])
    on_disk = {"parley"}
    for sub in SUBPACKAGES:
        assert setuptools["package-dir"][f"parley.{sub}"] == sub
        for init in (ROOT / sub).rglob("__init__.py"):
            if "__pycache__" not in init.parts:
                on_disk.add("parley." + ".".join(init.parent.relative_to(ROOT).parts))
    assert listed == on_disk, f"add to [tool.setuptools] packages: {sorted(on_disk - listed)}"


def test_no_bare_top_level_names_are_imported(tmp_path: Path) -> None:
    # Import every module of every subpackage, then look for the bare names in sys.modules.
    code = f"""
import importlib, pkgutil, sys
import parley
for sub in {SUBPACKAGES!r}:
    package = importlib.import_module("parley." + sub)
    for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
        if not info.name.endswith("__main__"):
            importlib.import_module(info.name)
from parley.environments.registry import all_games
assert len(all_games()) > 30
bare = sorted(name for name in sys.modules if name.split(".")[0] in {SUBPACKAGES!r})
print(bare)
"""
    assert run_python(code, tmp_path).strip() == "[]"


def test_the_wheel_holds_one_import_package(tmp_path: Path) -> None:
    require(importlib.util.find_spec("setuptools") is not None, "setuptools (a dev dependency)")
    built = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path / "dist"),
            str(ROOT),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = (tmp_path / "dist").glob("parley-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/")[0] for name in names}
    assert tops == {"parley", next(t for t in tops if t.endswith(".dist-info"))}
    # Package data travels with the code: the leak detector's labelled set, the typing marker.
    assert "parley/observability/leaks_labelled.jsonl" in names
    assert "parley/py.typed" in names
    assert "parley/runtime/reports/comma.py" in names

    # A regular (non-editable) install of that wheel plays the quickstart game.
    target = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "-q",
            "--target",
            str(target),
            str(wheel),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    out = run_python(
        "import parley.runtime.cli as cli, parley.environments.registry as r;"
        "print(cli.__file__); print(r.get('comma.wire').name)",
        tmp_path,
        env={"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin"},
    )
    module_file, game = out.split()
    assert Path(module_file).is_relative_to(target)
    assert game == "comma.wire"


def test_openai_agents_sdk_installed_beside_parley(tmp_path: Path) -> None:
    """`agents` is the OpenAI Agents SDK's import name; with both installed each keeps its own."""
    try:
        from importlib.metadata import distribution

        distribution("openai-agents")
    except Exception:
        require(False, "openai-agents installed (CI installs it to prove parley does not clash)")
    out = run_python(
        "import agents, parley.agents;"
        "print(agents.Agent.__module__);"
        "print(parley.agents.Agent.__module__)",
        tmp_path,
    )
    assert out.split() == ["agents.agent", "parley.agents.agent"]


def test_what_parley_imports_is_declared() -> None:
    """Every third-party package the code imports at run time is a declared dependency."""
    import ast
    import re
    from importlib.metadata import packages_distributions

    def normal(name: str) -> str:
        return re.sub(r"[-_.]+", "-", name).lower()

    project = pyproject()["project"]
    declared = {normal(re.split(r"[<>=!;\[ ]", dep)[0]) for dep in project["dependencies"]}
    optional = {
        normal(re.split(r"[<>=!;\[ ]", dep)[0])
        for deps in project["optional-dependencies"].values()
        for dep in deps
    }
    owners = packages_distributions()
    missing: dict[str, str] = {}
    for sub in SUBPACKAGES:
        for path in (ROOT / sub).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                for name in names:
                    top = name.split(".")[0]
                    if top in sys.stdlib_module_names or top == "parley":
                        continue
                    dists = {normal(d) for d in owners.get(top, [top])}
                    # Imported only inside a function for an optional feature: an extra will do.
                    if not dists & (declared | optional):
                        missing[top] = str(path.relative_to(ROOT))
    assert not missing, f"imported but not declared in pyproject.toml: {missing}"


def test_benchmark_and_grpc_dependencies_are_extras() -> None:
    project = pyproject()["project"]
    extras = project["optional-dependencies"]
    assert {"otlp-grpc", "bench", "dev"} <= set(extras)
    runtime_deps = " ".join(project["dependencies"])
    # What only benchmarks or a gRPC collector need is not forced on every user.
    assert "psutil" not in runtime_deps
    assert "otlp-proto-grpc" not in runtime_deps
