"""Names the experiment commands accept: a zoo model name or a prototxt path, and a profile
path or a profile name from models/profiles (`titanx-maxwell` for the model given).

The zoo (every model's prototxts and solvers, and the shipped profiles) is looked for, in
this order: the directory POSEIDON_MODELS names, ./models, the source checkout's models/,
and the copy an installed wheel carries (<prefix>/share/poseidon/models, CMakeLists.txt), so
that the documented commands work from any folder after `pip install`."""

from __future__ import annotations

import os
import sys
from pathlib import Path

DUMMY_NET = "train_val_dummy.prototxt"


def models_dirs() -> list[Path]:
    """Where the zoo may be, first wins (module docstring); those that exist."""
    here = Path(__file__).resolve()
    setting = os.environ.get("POSEIDON_MODELS", "")
    candidates = [Path(setting)] if setting else []
    candidates += [Path.cwd() / "models", here.parents[3] / "models",
                   Path(sys.prefix) / "share" / "poseidon" / "models"]  # fmt: skip
    seen, out = set(), []
    for path in candidates:
        if path.is_dir() and path.resolve() not in seen:
            seen.add(path.resolve())
            out.append(path)
    return out


def zoo_names() -> list[str]:
    names = set()
    for root in models_dirs():
        names.update(p.parent.name for p in root.glob(f"*/{DUMMY_NET}"))
    return sorted(names)


def resolve_model(model: str) -> tuple[str, str]:
    """(label, prototxt path) for a zoo name (its train_val_dummy.prototxt) or a path.
    ValueError lists the zoo when neither exists."""
    if os.path.isfile(model):
        return model_label(model), os.path.abspath(model)
    if os.path.sep in model or model.endswith(".prototxt"):
        raise ValueError(f"cannot read {model}: no such file")
    for root in models_dirs():
        path = root / model / DUMMY_NET
        if path.is_file():
            return model, str(path)
    known = ", ".join(zoo_names()) or "(no zoo found: set POSEIDON_MODELS to a models/ directory)"
    raise ValueError(f"unknown model {model!r}: not a file, and not a zoo name ({known})")


def model_label(path: str) -> str:
    """The zoo name of models/<name>/train_val*.prototxt, else the file's stem."""
    stem = Path(path).stem
    if stem.startswith("train_val"):
        return Path(path).resolve().parent.name or stem
    return stem


def resolve_profile(profile: str, model_label: str) -> str:
    """A profile path, or a name under models/profiles: `<model>.<device>.json`,
    `<model>.<device>` or just `<device>` (for the model given)."""
    if os.path.isfile(profile):
        return os.path.abspath(profile)
    names = [profile, f"{profile}.json", f"{model_label}.{profile}.json"]
    for root in models_dirs():
        for name in names:
            path = root / "profiles" / name
            if path.is_file():
                return str(path)
    shipped = shipped_profiles(model_label)
    raise ValueError(
        f"profile {profile!r}: no such file, and no models/profiles/ entry for "
        f"{model_label!r} (shipped for it: {', '.join(shipped) or 'none'}; `poseidon models` "
        "lists every model's)"
    )


def shipped_profiles(model: str) -> list[str]:
    """The device names of `model`'s shipped profiles (models/profiles/<model>.<device>.json)
    in every zoo, each once, the first zoo's first."""
    devices: dict[str, None] = {}
    for root in models_dirs():
        for path in sorted((root / "profiles").glob(f"{model}.*.json")):
            devices.setdefault(path.name[len(model) + 1 : -len(".json")], None)
    return list(devices)
