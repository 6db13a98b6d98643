"""The workload as Hydra composes it: ``workload=NAME`` plus DLIO's override grammar
(``++workload.a.b=v``), config groups and ``--config-dir``, without a hand-written parser; then
validated, with pydantic's and Hydra's errors rewritten as ones that teach."""

from __future__ import annotations

import difflib
import os
from pathlib import Path
from typing import Any, Literal, cast

from pydantic import BaseModel, ValidationError

from dlio_ckpt.config import rules
from dlio_ckpt.config.keys import _keys_of, workload_keys
from dlio_ckpt.config.references import expand as with_reference
from dlio_ckpt.config.schema import Workload
from dlio_ckpt.errors import ConfigError


def config_root() -> Path:
    """The packaged configs: ``dlio_ckpt/configs`` when installed, the repo's ``configs/`` else."""
    package = Path(__file__).parents[1]
    installed = package / "configs"
    return installed if (installed / "config.yaml").is_file() else package.parent / "configs"


def available_workloads(config_dir: str | None = None) -> list[str]:
    dirs = [config_root() / "workload"] + ([Path(config_dir) / "workload"] if config_dir else [])
    return sorted({p.stem for d in dirs if d.is_dir() for p in d.glob("*.yaml")})


def compose(overrides: list[str], config_dir: str | None = None, folder: Literal["run", "sweep"] = "run",
            ) -> tuple[Workload, dict, str]:
    """Compose ``workload=NAME`` plus overrides, validate, and return (workload, raw dict, run dir;
    or with ``folder="sweep"`` the sweep's folder).

    The run dir is returned unresolved-by-us: Hydra resolves ``${now:...}`` here, so only rank 0
    should call this for the directory it will broadcast (all ranks may call it to validate).
    """
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    check_override_keys(overrides)
    extra = list(overrides)
    if config_dir is not None:
        if not os.path.isdir(config_dir):
            raise ConfigError("--config-dir", config_dir, "is not a directory")
        extra.append(f"hydra.searchpath=[file://{os.path.abspath(config_dir)}]")
    try:
        with initialize_config_dir(config_dir=str(config_root()), version_base=None):
            cfg = hydra_compose("config", overrides=extra, return_hydra_config=True)
            raw = OmegaConf.to_container(cfg.workload, resolve=True)
            run_dir = str(cfg.hydra[folder].dir)
    except (HydraException, OmegaConfBaseException) as exc:
        raise ConfigError("", None, _hydra_message(exc, config_dir)) from None
    except Exception as exc:  # malformed YAML surfaces as yaml.YAMLError from inside Hydra
        if type(exc).__module__.startswith("yaml"):
            raise ConfigError("", None, f"malformed YAML: {exc}") from None
        raise
    if not isinstance(raw, dict):
        raise ConfigError("workload", raw, "must be a mapping of sections (model, checkpoint, ...)")
    workload = with_reference(cast(dict[str, Any], raw))  # its keys set: the run folder's config says what ran
    return validate(workload), workload, run_dir


def parse_overrides(overrides: list[str]) -> list[Any]:
    """Hydra's parse of the command line's overrides (its ``Override`` objects); its syntax errors
    as one line of ours."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    try:
        return OverridesParser.create().parse_overrides(overrides)
    except HydraException as exc:
        raise ConfigError("", None, str(exc).replace("\n", " ")) from None


def check_override_keys(overrides: list[str]) -> None:
    """An override whose key is neither the workload's nor Hydra's would be composed into the config
    and then read by nothing (``++checkpoint.format=raw`` wrote pt): it is an error, naming the key
    the user most likely meant."""
    for o in parse_overrides(overrides):
        key = o.key_or_group
        if key in ("workload", "hydra") or key.startswith(("workload.", "hydra.", "hydra/")):
            continue
        known = [k.removeprefix("workload.") for k in workload_keys()]
        guess = key if key in known else next(iter(difflib.get_close_matches(key, known, n=1, cutoff=0.8)), None)
        hint = f"did you mean workload.{guess}? " if guess else ""
        raise ConfigError(key, o.input_line.partition("=")[2], f"not a key of the configuration ({hint}workload keys "
                          "are set as ++workload.SECTION.KEY=VALUE, Hydra's as ++hydra.KEY=VALUE; `dlio_ckpt keys` "
                          "lists them)")


def _hydra_message(exc: Exception, config_dir: str | None) -> str:
    text = str(exc).strip()
    if text.startswith("Could not override '") and "To append to your config use +" in text:
        key = text.split("'")[1]
        known = workload_keys()
        open_ = [k for k, f in _keys_of(Workload, "workload") if "dict" in str(f.annotation)]  # any key below
        if key not in known and not any(key.startswith(k + ".") for k in open_):  # a typo, not a missing key
            close = difflib.get_close_matches(key, known, n=1, cutoff=0.8)
            hint = f" (did you mean {close[0]}?)" if close else ""
            return f"{key}: not a key of the configuration{hint}; `dlio_ckpt keys` lists them"
        return (f"{key}: not in the workload's YAML, so Hydra cannot override it: write ++{key}=... "
                "(sets a key whether or not the YAML has it)")
    if "You must specify 'workload'" in text or "Could not find 'workload/" in text:
        names = ", ".join(available_workloads(config_dir))
        first = text.splitlines()[0].removeprefix("In 'config': ")
        return f"workload: {first}; available: {names}"
    return text.replace("\n", " ")


def validate(raw: Any) -> Workload:
    """Validate a composed workload dict, turning pydantic's errors into ones that teach: each section by its
    model, then the rules that read several sections (:func:`dlio_ckpt.config.rules.check`), a step of its own
    rather than a validator of the model, which the rules read."""
    if not isinstance(raw, dict):
        raise ConfigError("workload", raw, "must be a mapping of sections (model, checkpoint, ...)")
    try:
        workload = Workload.model_validate(with_reference(raw))
    except ValidationError as exc:
        lines = [_explain(err) for err in exc.errors()]
        raise ConfigError("", None, "invalid workload configuration:\n  " + "\n  ".join(lines)) from None
    rules.check(workload)
    return workload


def _explain(err: Any) -> str:
    loc = list(err["loc"])
    key = "workload" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc)
    if err["type"] == "extra_forbidden":
        parent = _model_at(loc[:-1])
        allowed = sorted(parent.model_fields) if parent else []
        close = difflib.get_close_matches(loc[-1], allowed, n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        return (f"{key}={err['input']!r}: unknown key{hint}; allowed keys here: "
                f"{', '.join(allowed)}")
    if err["type"] == "missing":
        return f"{key}: required key is missing"
    return f"{key}={err['input']!r}: {err['msg']}"


def _model_at(path: list[str | int]) -> type[BaseModel] | None:
    """The section a validation error's location points into (a list's item: its element model)."""
    model: type[BaseModel] = Workload
    ann: Any = None
    for part in path:
        if isinstance(part, int):  # an item of a list field such as tiers: its element type
            args = getattr(ann, "__args__", ())
            ann = args[0] if args else None
        else:
            ann = getattr(model.model_fields.get(part), "annotation", None)
        if not (isinstance(ann, type) and issubclass(ann, BaseModel)):
            if isinstance(part, int) or getattr(ann, "__args__", None) is None:
                return None
            continue  # a list: the next part is its index
        model = ann
    return model
