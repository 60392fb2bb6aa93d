"""gflags-style command-line flags for the `caffe` command (docs/caffe_format.md §7).

Accepted spellings, as gflags: `-flag value`, `--flag value`, `-flag=value`,
`--flag=value`; boolean flags also as `--flag` / `--noflag`; `--` ends the flags. Flags may
come before or after the command. Every problem raises FlagError with gflags' wording.
"""

from __future__ import annotations

from dataclasses import dataclass

from caffe.errors import CaffeError


class FlagError(CaffeError):
    """A flag that is unknown, lacks its value, or has a value of the wrong type."""


@dataclass(frozen=True)
class FlagSpec:
    name: str
    default: str | int | bool
    help: str

    @property
    def kind(self) -> str:
        if isinstance(self.default, bool):
            return "bool"
        return "int32" if isinstance(self.default, int) else "string"


FLAG_SPECS = [
    FlagSpec("solver", "", "The solver definition protocol buffer text file."),
    FlagSpec("model", "", "The model definition protocol buffer text file."),
    FlagSpec("phase", "", "Optional; network phase (TRAIN or TEST). Only used for 'time'."),
    FlagSpec("level", 0, "Optional; network level."),
    FlagSpec("stage", "", "Optional; network stages (not to be confused with phase), "
                          "separated by ','."),
    FlagSpec("snapshot", "", "Optional; the snapshot solver state to resume training."),
    FlagSpec("weights", "", "Optional; the pretrained weights to initialize finetuning, "
                            "separated by ','. Cannot be set simultaneously with snapshot."),
    FlagSpec("iterations", 50, "The number of iterations to run."),
    FlagSpec("gpu", "", "Optional; run in GPU mode on given device IDs separated by ','. "
                        "Use '-gpu all' to run on all available GPUs."),
    FlagSpec("sigint_effect", "stop", "Optional; action to take when a SIGINT signal is "
                                      "received: snapshot, stop or none."),
    FlagSpec("sighup_effect", "snapshot", "Optional; action to take when a SIGHUP signal is "
                                          "received: snapshot, stop or none."),
    FlagSpec("nonfinite_limit", 10, "Optional; stop training with an error after this many "
                                    "consecutive iterations whose loss or gradient is NaN or "
                                    "infinite; 0 never stops (BVLC Caffe's behaviour)."),
    FlagSpec("debug", False, "Show Python tracebacks for errors (also CAFFE_DEBUG=1)."),
]  # fmt: skip
_SPECS = {spec.name: spec for spec in FLAG_SPECS}
_TRUE = {"true", "t", "yes", "y", "1"}
_FALSE = {"false", "f", "no", "n", "0"}
# Handled by the command itself rather than stored as flags.
SPECIAL_FLAGS = ("help", "helpshort", "version")


@dataclass
class Flags:
    solver: str = ""
    model: str = ""
    phase: str = ""
    level: int = 0
    stage: str = ""
    snapshot: str = ""
    weights: str = ""
    iterations: int = 50
    gpu: str = ""
    sigint_effect: str = "stop"
    sighup_effect: str = "snapshot"
    nonfinite_limit: int = 10
    debug: bool = False

    @property
    def stages(self) -> list[str]:
        return [s for s in self.stage.split(",") if s]

    @property
    def weight_files(self) -> list[str]:
        return [w for w in self.weights.split(",") if w]


@dataclass
class CommandLine:
    positional: list[str]
    flags: Flags
    special: set[str]


def _convert(spec: FlagSpec, value: str) -> str | int | bool:
    if spec.kind == "int32":
        try:
            number = int(value, 10)
        except ValueError:
            number = None
        if number is None or not -(2**31) <= number < 2**31:
            raise FlagError(f"illegal value '{value}' specified for int32 flag '{spec.name}'")
        return number
    if spec.kind == "bool":
        if value.lower() in _TRUE:
            return True
        if value.lower() in _FALSE:
            return False
        raise FlagError(f"illegal value '{value}' specified for bool flag '{spec.name}'")
    return value


def parse_command_line(argv: list[str]) -> CommandLine:
    """Split argv (without the program name) into positional words, flags and --help etc."""
    flags = Flags()
    positional: list[str] = []
    special: set[str] = set()
    i = 0
    while i < len(argv):
        arg = argv[i]
        i += 1
        if arg == "--":
            positional.extend(argv[i:])
            break
        if not arg.startswith("-") or arg == "-":
            positional.append(arg)
            continue
        name, has_value, value = arg.lstrip("-").partition("=")
        if name in SPECIAL_FLAGS and not has_value:
            special.add(name)
            continue
        spec = _SPECS.get(name)
        if spec is None and name.startswith("no") and not has_value:
            negated = _SPECS.get(name[2:])
            if negated is not None and negated.kind == "bool":
                setattr(flags, negated.name, False)
                continue
        if spec is None:
            raise FlagError(f"unknown command line flag '{name}'")
        if not has_value:
            if spec.kind == "bool":
                setattr(flags, spec.name, True)
                continue
            if i >= len(argv):
                raise FlagError(
                    f"flag '{name}' is missing its argument; flag description: {spec.help}"
                )
            value = argv[i]
            i += 1
        setattr(flags, spec.name, _convert(spec, value))
    return CommandLine(positional, flags, special)


def flags_help() -> str:
    """The flag table, as gflags' --help prints it."""
    lines = []
    for spec in FLAG_SPECS:
        default = str(spec.default).lower() if spec.kind == "bool" else spec.default
        quoted = f'"{default}"' if spec.kind == "string" else default
        lines.append(f"    -{spec.name} ({spec.help}) type: {spec.kind} default: {quoted}")
    return "\n".join(lines)
