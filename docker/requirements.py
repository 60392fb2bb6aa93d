"""Print requirements of pyproject.toml, one per line, for docker/build.sh.

    python3 docker/requirements.py pyproject.toml build             # [build-system] requires
    python3 docker/requirements.py pyproject.toml run demo,images   # dependencies + extras

The images install the dependencies in a layer of their own, from pyproject.toml alone,
before the sources are copied: a change to the sources then rebuilds the project, not
torch. pyproject.toml stays the one list of what the project needs. Python 3.11+ (tomllib).
"""

from __future__ import annotations

import sys

import tomllib


def requirements(pyproject: dict, what: str, extras: list[str]) -> list[str]:
    if what == "build":
        return list(pyproject["build-system"]["requires"])
    project = pyproject["project"]
    found = list(project.get("dependencies", []))
    optional = project.get("optional-dependencies", {})
    for extra in extras:
        if extra not in optional:
            raise SystemExit(f"no extra {extra!r} in pyproject.toml; known: {sorted(optional)}")
        found += optional[extra]
    return found


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 3) or argv[1] not in ("build", "run"):
        print(__doc__, file=sys.stderr)
        return 2
    with open(argv[0], "rb") as f:
        pyproject = tomllib.load(f)
    extras = [e for e in (argv[2] if len(argv) == 3 else "").split(",") if e]
    print("\n".join(requirements(pyproject, argv[1], extras)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
