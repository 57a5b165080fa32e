"""The lock: every package of the course's environment, with its hashes (``make lock``).

``pyproject.toml`` pins the packages the course asks for; ``requirements.lock`` pins every
package they bring in, each with the SHA-256 of its files, and is what ``make setup``
installs (``pip install --require-hashes``). ``environment.yml`` mirrors it for conda: the
same packages at the same versions, without hashes (conda's pip step cannot take them beside
the project's own ``-e .``). ``tests/test_project.py`` fails when the three disagree.

``python tools/lock.py`` (``make lock``) resolves ``pyproject.toml`` afresh with pip-tools
and writes both files. The CPU build of torch is the one pip finds on this machine (its
version ends in ``+cpu``); ``environment.yml`` asks for the same release without the build
label, which conda's pip takes from PyPI on any platform.
"""

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOCK = ROOT / "requirements.lock"
ENVIRONMENT = ROOT / "environment.yml"

# Packages that a known advisory needs at or above a version (the lock is checked against
# these): jupyter-server before 2.20.0 lets HTML in a notebook output take the token of whoever
# opens it in the server's nbconvert view (CVE-2026-44727); nbgrader 0.9.6 fixes a path
# traversal.
FLOORS = {"jupyter-server": "2.20.0", "nbgrader": "0.9.6"}

# conda provides these itself; the lock keeps them (pip-tools' "unsafe" packages).
NOT_IN_ENVIRONMENT = {"pip", "setuptools"}

COMPILE = [
    "-m",
    "piptools",
    "compile",
    "--quiet",
    "--extra=dev",
    "--generate-hashes",
    "--allow-unsafe",
    "--strip-extras",
    "--no-emit-index-url",
    "--no-emit-find-links",
    "--output-file=requirements.lock",
    "pyproject.toml",
]

_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s\\;]+)", re.MULTILINE)


def normalised(name: str) -> str:
    """A package's name as PyPI compares names (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def locked(text: str) -> dict[str, str]:
    """Package name (normalised) -> version, from the text of a lock."""
    return {normalised(name): version for name, version in _PIN.findall(text)}


def direct(text: str) -> set[str]:
    """The packages of a lock that pip-tools says come from pyproject.toml itself."""
    found, current = set(), None
    for line in text.splitlines():
        pin = _PIN.match(line)
        if pin:
            current = normalised(pin.group(1))
        elif current and "(pyproject.toml)" in line:
            found.add(current)
    return found


def release(version: str) -> str:
    """A version without its local build label: ``2.13.0+cpu`` -> ``2.13.0``."""
    return version.split("+", 1)[0]


def environment_yml(pins: dict[str, str]) -> str:
    """environment.yml for the locked ``pins``."""
    lines = [
        "# Conda environment for students and Binder: every package of requirements.lock at",
        "# its version (written by `make lock`, tools/lock.py; tests/test_project.py fails when",
        "# the two disagree). torch is the release of the lock's CPU build.",
        "name: attention-course",
        "channels:",
        "  - conda-forge",
        "dependencies:",
        "  - python=3.11",
        "  - pip",
        "  - pip:",
    ]
    for name, version in sorted(pins.items()):
        if name not in NOT_IN_ENVIRONMENT:
            lines.append(f"      - {name}=={release(version)}")
    lines.append("      - -e .")
    return "\n".join(lines) + "\n"


def main() -> int:
    subprocess.run([sys.executable, *COMPILE], cwd=ROOT, check=True)
    ENVIRONMENT.write_text(environment_yml(locked(LOCK.read_text())), encoding="utf-8")
    print(f"wrote {LOCK.name} and {ENVIRONMENT.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
