"""The `poseidon` command: a dispatcher over subcommand modules.

Each subcommand lives in its own module that defines HELP (one line),
add_arguments(parser) and run(args) -> exit code. Adding a subcommand is one
line in COMMANDS. Modules must stay cheap to import (heavy imports inside
run), since every invocation builds the whole parser.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

COMMANDS: dict[str, str] = {
    "coordinator": "poseidon.commands.coordinator",
    "server": "poseidon.commands.server",
    "plan": "poseidon.commands.plan",
    "launch": "poseidon.commands.launch",
    "demo": "poseidon.commands.demo",
    "experiment": "poseidon.commands.experiment",
    "predict": "poseidon.commands.predict",
    "profile": "poseidon.commands.profile",
    "models": "poseidon.commands.models",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="poseidon",
        description="Poseidon: distributed training communication (PS + SFB).",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, module_name in COMMANDS.items():
        module = importlib.import_module(module_name)
        p = sub.add_parser(name, help=module.HELP, description=module.__doc__)
        module.add_arguments(p)
        p.set_defaults(_run=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args._run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
