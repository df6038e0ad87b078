"""``make lint``'s type check: mypy strict over the ``memstack`` package as it installs.

The package's subpackages live in the top-level folders (``pyproject.toml`` maps them), and
mypy reads a package from one directory tree. So this assembles that tree for mypy alone, out
of the checkout, in a temporary directory of links (the root package's entries plus one link
per mapped folder, as the wheel lays them out), and runs ``mypy -p memstack`` there with the
project's configuration. Errors name paths inside the package (``memstack/pipelines/...``);
the file is the checkout's ``pipelines/...``.

Usage: ``python tests/typecheck.py [extra mypy arguments]``; exits with mypy's status.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def package_tree(into: Path) -> Path:
    """``into/memstack``: the installed layout of the package, made of links to the checkout."""
    mapping = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-dir"]
    package = into / "memstack"
    package.mkdir()
    for entry in (ROOT / mapping["memstack"]).iterdir():
        if entry.name != "__pycache__":
            (package / entry.name).symlink_to(entry)
    for name, folder in mapping.items():
        if name != "memstack":
            (package / name.split(".", 1)[1]).symlink_to(ROOT / folder)
    return package


def main(argv: list[str]) -> int:
    with tempfile.TemporaryDirectory(prefix="memstack-typecheck-") as tmp:
        package_tree(Path(tmp))
        cmd = [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
               "--cache-dir", str(ROOT / ".mypy_cache"), "-p", "memstack", *argv]
        return subprocess.run(cmd, cwd=tmp, check=False).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
