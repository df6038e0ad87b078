"""The package's shape: a plain tree, mapped by the build backend, that installs the same way
from a wheel, an sdist or an editable checkout, and is never written to at run time.

- no symbolic link anywhere in the source tree;
- ``pyproject.toml``'s package list names exactly the folders that hold an ``__init__.py``
  under the mapped folders (a new sub-package cannot be left out of the wheel), except the lab
  (``[tool.memstack] lab``: the benchmarks and evaluations, left out of the wheel on purpose:
  20% of the code, a fault-injection harness and evaluations whose data is not shipped, none
  of which an install of memstack runs); the lab's folders exist and hold no product package;
- (slow) ``python -m build`` gives a wheel and an sdist; the sdist holds the tests, the docs
  and the lab; the wheel holds no module of the lab (the light install and ``[server]`` install
  that one wheel: extras add dependencies only), and ``memstack bench``/``eval`` on the
  installed package says to run them from a checkout; a fresh virtualenv that installs the sdist
  (its heavy dependencies borrowed from this
  environment's site-packages, so the check takes seconds, not a torch download) passes the
  unit tests of pure logic, run against the installed package, and those runs and a jar
  resolution leave the installed package's files exactly as pip wrote them.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import tarfile
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SKIPPED = {".git", ".venv", "out", "build", "dist", ".mypy_cache", ".ruff_cache", ".hypothesis",
           ".memstack", "__pycache__"}
UNIT_TESTS = ["tests/operators", "tests/schemas", "tests/property"]


def _setuptools() -> dict[str, object]:
    config: dict[str, object] = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"][
        "setuptools"]
    return config


def _walk(folder: Path) -> list[Path]:
    out: list[Path] = []
    for entry in folder.iterdir():
        if entry.name in SKIPPED or entry.name.endswith(".egg-info"):
            continue
        out.append(entry)
        if entry.is_dir() and not entry.is_symlink():
            out += _walk(entry)
    return out


def test_no_symbolic_link_in_the_tree() -> None:
    links = [str(p.relative_to(ROOT)) for p in _walk(ROOT) if p.is_symlink()]
    assert links == []


def lab() -> list[str]:
    """The packages of the lab (benchmarks, evaluations), which the wheel leaves out."""
    names: list[str] = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"][
        "memstack"]["lab"]
    return names


def _package_folders() -> set[str]:
    config = _setuptools()
    mapping = config["package-dir"]
    assert isinstance(mapping, dict)
    found = set()
    for name, folder in mapping.items():
        base = ROOT / folder
        for init in base.rglob("__init__.py"):
            rel = init.parent.relative_to(base)
            if "__pycache__" in rel.parts:
                continue
            inner = ".".join(rel.parts)
            found.add(f"{name}.{inner}" if inner else name)
    return found


def test_the_package_list_names_every_package_folder_but_the_lab() -> None:
    packages = _setuptools()["packages"]
    assert isinstance(packages, list)
    labs = lab()
    assert labs, "pyproject.toml's [tool.memstack] lab names no package"
    assert not set(labs) & set(packages), "a lab package is in the wheel's package list"
    # the lab is whole packages: a product package inside a lab folder would be left out too
    inside = sorted(p for p in packages if any(p.startswith(f"{name}.") for name in labs))
    assert inside == []
    found = _package_folders()
    assert set(labs) <= found, "a lab package named in pyproject.toml has no folder"
    lab_or_inside = {p for p in found if any(p == n or p.startswith(f"{n}.") for n in labs)}
    assert sorted(found - lab_or_inside) == sorted(packages)


def _wheel_path(package: str) -> str:
    """``memstack.jobs.bench`` -> ``memstack/jobs/bench/`` (a wheel's paths)."""
    return package.replace(".", "/") + "/"


def _run(cmd: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=900,
                          **kwargs)  # type: ignore[call-overload]
    assert done.returncode == 0, f"{cmd} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done  # type: ignore[no-any-return]


def _files(folder: Path) -> dict[str, float]:
    return {str(p.relative_to(folder)): p.stat().st_mtime for p in folder.rglob("*")
            if p.is_file()}


@pytest.mark.slow
def test_sdist_and_wheel_install_the_same_tree_and_pass_the_unit_tests(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    # sdist first, then the wheel built from the sdist alone: proves the sdist is complete
    _run([sys.executable, "-m", "build", "--outdir", str(dist), str(ROOT)])
    sdist, = dist.glob("memstack-*.tar.gz")
    wheel, = dist.glob("memstack-*.whl")
    with tarfile.open(sdist) as tar:
        sdist_names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    with zipfile.ZipFile(wheel) as zf:
        wheel_names = set(zf.namelist())
    for needed in ["tests/conftest.py", "docs/architecture.md", "Makefile",
                   "pipelines/live_batches.py", "infra/kafka/pom.xml", "schemas/event.v1.json"]:
        assert needed in sdist_names, f"the sdist lacks {needed}"
    for needed in ["memstack/pipelines/live_batches.py", "memstack/infra/kafka/pom.xml",
                   "memstack/infra/kafka/log4j2-broker.properties", "memstack/py.typed",
                   "memstack/schemas/event.v1.json",
                   "memstack/server/inspector/static/index.html"]:
        assert needed in wheel_names, f"the wheel lacks {needed}"
    assert not any(n.startswith(("tests/", "memstack/tests/")) for n in wheel_names)
    # The lab: in the sdist (a checkout's worth), in no wheel. The light install and the server
    # install are this one wheel (extras only add Requires-Dist lines), so neither holds it.
    for needed in ["jobs/bench/forget/__init__.py", "jobs/bench/broker_env.py",
                   "jobs/eval/faults/__init__.py",
                   "jobs/scale_bench_device.sh"]:
        assert needed in sdist_names, f"the sdist lacks the lab's {needed}"
    labs = [_wheel_path(name) for name in lab()]
    assert sorted(n for n in wheel_names if n.startswith(tuple(labs))) == []
    assert "memstack/jobs/measure.py" in wheel_names  # the commands' side stays
    assert not any(n.startswith("memstack/jobs/") and n.endswith((".sh", "cluster_check.py",
                                                                     "broker_env.py"))
                   for n in wheel_names)
    with zipfile.ZipFile(wheel) as zf:
        meta, = (n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        extras = [line for line in zf.read(meta).decode().splitlines()
                  if line.startswith("Provides-Extra:")]
    assert "Provides-Extra: server" in extras

    venv = tmp_path / "venv"
    _run(["python3.11", "-m", "venv", str(venv)])
    site = next((venv / "lib").glob("python3*/site-packages"))
    # The heavy dependencies come from this environment; the package itself only from the sdist.
    (site / "borrowed.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    _run([str(venv / "bin/pip"), "install", "--disable-pip-version-check", "-q", "--no-deps",
          str(sdist)], env=env)
    installed = site / "memstack"
    assert (installed / "pipelines" / "live_batches.py").is_file()
    record, = site.glob("memstack-*.dist-info/RECORD")
    assert [line for line in record.read_text().splitlines()
            if line.startswith(tuple(labs))] == []
    before = _files(installed)

    work = tmp_path / "work"  # the sdist's tests and docs, beside no package source to shadow it
    with tarfile.open(sdist) as tar:
        tar.extractall(tmp_path / "src", filter="data")
    src, = (tmp_path / "src").iterdir()
    work.mkdir()
    (work / "pyproject.toml").write_bytes((src / "pyproject.toml").read_bytes())
    for folder in ("tests", "docs"):  # a test reads its example from the docs
        os.rename(src / folder, work / folder)
    where = _run([str(venv / "bin/python"), "-c",
                  "import memstack.pipelines.live_batches as m; print(m.__file__)"],
                 cwd=work, env=env)
    assert where.stdout.strip().startswith(str(installed))
    # no lab module imports; `memstack bench|eval` say where the lab is, without a traceback
    _run([str(venv / "bin/python"), "-c", "import importlib.util as u; "
          "assert u.find_spec('memstack.jobs.bench') is None, 'the lab is installed'; "
          "assert u.find_spec('memstack.jobs.eval') is None, 'the lab is installed'"],
         cwd=work, env=env)
    for family in ("bench", "eval"):
        done = subprocess.run([str(venv / "bin/python"), "-m", "memstack.cli", family, "forget",
                               "--quick", "--json"], cwd=work, env=env, capture_output=True,
                              text=True, timeout=300, check=False)
        assert done.returncode == 2, done.stderr[-3000:]
        assert "ship with a checkout" in done.stderr and "make install" in done.stderr
        assert "Traceback" not in done.stderr and done.stdout == ""
    cache = tmp_path / "cache"
    _run([str(venv / "bin/python"), "-m", "pytest", "-q", "-x", *UNIT_TESTS], cwd=work,
         env={**env, "MEMSTACK_CACHE": str(cache), "MEMSTACK_HOME": str(tmp_path / "home")})
    _run([str(venv / "bin/python"), "-c", "from memstack.infra.jars import resolve_jars; "
          "print(resolve_jars())"], cwd=work, env={**env, "MEMSTACK_CACHE": str(cache)})
    assert list((cache / "jars").glob("kafka-*/lib/kafka_2.13-*.jar"))
    assert _files(installed) == before, "something wrote inside the installed package"
