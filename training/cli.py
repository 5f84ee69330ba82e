"""Command-line errors as one `error:` line, exit 2: Hydra's own errors, before Hydra starts,
and OSErrors of the environment (`environment_error`).

Hydra reports a bad command line (an unknown key without `+`, a missing option such as
`model=foo`, a sweep file that is not valid YAML or not a mapping) in 6 to 95 lines and exits 1.
`check_composes` composes the same config first, with Hydra's compose API and the same config
search path, and turns those errors into one line naming the key or group; the real
`hydra.main` then runs on a command line known to compose. Costs one extra composition (~0.2 s).
"""

from __future__ import annotations

import errno
import re
import sys
from collections.abc import Sequence
from pathlib import Path

import yaml
from hydra import compose, initialize_config_dir
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException, MissingConfigException
from omegaconf import OmegaConf
from omegaconf.errors import InterpolationResolutionError, OmegaConfBaseException

# OSErrors the user fixes outside the project (permissions, a read-only or full disk, a file
# where a folder should be, a symlink where a lock file should be): one `error:` line and exit
# 2, like bad input.
ENVIRONMENT_ERRNOS = {
    errno.EACCES,
    errno.EPERM,
    errno.EROFS,
    errno.ENOSPC,
    errno.EDQUOT,
    errno.ENOTDIR,
    errno.EEXIST,
    errno.ENAMETOOLONG,
    errno.ELOOP,  # a symlink planted where a lock file goes (`training.paths.open_lock`)
}


def environment_error(e: OSError) -> str | None:
    """One line (the path and why) for an OSError of ENVIRONMENT_ERRNOS, else None."""
    if e.errno not in ENVIRONMENT_ERRNOS:
        return None
    where = f"{e.filename}: " if e.filename and str(e.filename) not in str(e.strerror) else ""
    return f"{where}{e.strerror}"


# Hydra flags that take a value (the next argument), and flags that take none.
_FLAGS_WITH_VALUE = {"--config-dir", "-cd", "--config-path", "-cp", "--config-name", "-cn"}


def _split_argv(argv: Sequence[str]) -> tuple[list[str], list[str], str | None]:
    """(overrides, extra config dirs, the config name of -cn) of a Hydra command line; other
    flags are dropped."""
    overrides, dirs, name, args = [], [], None, list(argv)
    while args:
        arg = args.pop(0)
        flag, eq, value = arg.partition("=")
        if flag in _FLAGS_WITH_VALUE:
            value = value if eq else (args.pop(0) if args else "")
            if flag in ("--config-dir", "-cd"):
                dirs.append(value)
            elif flag in ("--config-name", "-cn"):
                name = value
        elif not arg.startswith("-"):
            overrides.append(arg)
    return overrides, dirs, name


def _one_value(overrides: list[str]) -> list[str]:
    """Each sweep override (`a=1,2`, `range(...)`) replaced by its first value: compose takes
    one config; the keys and groups are what is checked here."""
    out = []
    for text, override in zip(overrides, OverridesParser.create().parse_overrides(overrides)):
        if override.is_sweep_override():
            first = next(iter(override.sweep_string_iterator()), "")
            text = f"{override.get_key_element()}={first}"
        out.append(text)
    return out


def explain(e: BaseException, overrides: Sequence[str]) -> str:
    """One line for an error Hydra raised while composing."""
    text = str(e).strip()
    if isinstance(e, yaml.YAMLError):
        mark = getattr(e, "problem_mark", None)
        where = f"{mark.name}, line {mark.line + 1}" if mark is not None else "a config file"
        problem = getattr(e, "problem", None) or text.splitlines()[0]
        return f"{where}: not valid YAML ({problem})"
    if m := re.match(r"Could not override '([^']+)'", text):
        key = m.group(1)
        given = next((o for o in overrides if o.split("=", 1)[0] == key), f"{key}=...")
        return f"{key}: unknown key; to add a new key use +{given}"
    if m := re.search(r"Could not find '([^']+)/([^'/]+)'", text):
        group, name = m.group(1), m.group(2)
        options = re.findall(r"^\t(\S+)$", text.split("Config search path:")[0], re.M)
        available = f"; available: {', '.join(options)}" if options else ""
        return f"{group}={name}: unknown {group}{available}"
    if m := re.match(r"In '([^']+)': .*", text):
        where = m.group(1)
        if "Cannot merge DictConfig with ListConfig" in text:
            return f"{where}.yaml: must be a mapping (key: value lines), not a list"
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return " ".join(lines[:2]) or type(e).__name__


def check_composes(conf_dir: Path, config_name: str, argv: Sequence[str]) -> None:
    """Exit 2 with one `error:` line if `argv` (a Hydra command line for `config_name` in
    `conf_dir`) does not compose; return otherwise."""
    overrides, dirs, name = _split_argv(argv)
    for folder in dirs:  # Hydra says "not found" in a traceback
        if not Path(folder).is_dir():
            _exit(f"--config-dir: {folder} is not a folder")
    config_name = name or config_name
    try:
        composable = _one_value(overrides)
        if dirs:  # what --config-dir adds to the search path
            paths = ",".join(f"file://{Path(d).resolve()}" for d in dirs)
            composable.append(f"hydra.searchpath=[{paths}]")
        with initialize_config_dir(str(conf_dir), version_base="1.3"):
            cfg = compose(config_name, overrides=composable, return_hydra_config=True)
        for section in cfg:  # interpolations (${oc.env:NOPE}); hydra's own resolve in the app
            if section != "hydra":
                OmegaConf.to_container(cfg[section], resolve=True)
    except MissingConfigException as e:
        if name is not None and "primary config" in str(e):
            found = sorted(p.stem for p in conf_dir.glob("*.yaml"))
            _exit(f"-cn {name}: no config {name!r}; available: {', '.join(found)}")
        _exit(explain(e, overrides))
    except InterpolationResolutionError as e:
        where = f"{e.full_key}: " if getattr(e, "full_key", None) else ""
        _exit(f"{where}{str(e).splitlines()[0]}")
    except (HydraException, OmegaConfBaseException, yaml.YAMLError) as e:
        _exit(explain(e, overrides))
    except OSError as e:  # a config group Hydra looks up under a name too long for a file
        keys = [o.split("=", 1)[0].lstrip("+~") for o in overrides]
        key = next((k for k in keys if k and k in str(e.filename)), None)
        where = key or str(e.filename)
        _exit(f"{where[:60]}{'...' if len(where) > 60 else ''}: {e.strerror}")


def _exit(line: str) -> None:
    print(f"error: {line}", file=sys.stderr)
    sys.exit(2)
