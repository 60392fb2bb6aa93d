"""List the model zoo: every model's name (what `--model` takes), the directory it was found
in, and the devices of its shipped profiles (what `--profile` takes for it). The zoo is
looked for in POSEIDON_MODELS, ./models, the source checkout and an installed wheel's copy
(poseidon/experiments/resolve.py), first wins."""

from __future__ import annotations

import argparse

HELP = "list the model zoo's names and their shipped compute profiles"


def add_arguments(p: argparse.ArgumentParser) -> None:
    del p  # no options


def run(args: argparse.Namespace) -> int:
    from poseidon.experiments.resolve import DUMMY_NET, models_dirs, shipped_profiles, zoo_names

    del args
    names = zoo_names()
    if not names:
        print("no model zoo found: set POSEIDON_MODELS to a models/ directory")
        return 1
    roots = models_dirs()
    print(f"zoo: {roots[0]}" + "".join(f" (then {r})" for r in roots[1:]))
    width = max(len(n) for n in names)
    print(f"{'model':<{width}}  profiles")
    for name in names:
        found = next(r for r in roots if (r / name / DUMMY_NET).is_file())
        profiles = ", ".join(shipped_profiles(name)) or "-"
        where = "" if found == roots[0] else f"  [{found}]"
        print(f"{name:<{width}}  {profiles}{where}")
    return 0
