"""MkDocs hook: the reference pages generated from the code at every build, so they cannot drift from it.

- ``reference/keys.md``: every workload key, as ``dlio_ckpt keys`` prints it (that command's own text,
  read from the configuration's pydantic models and each backend's options model);
- ``reference/commands.md``: every command and flag, from the argparse parsers (``dlio_ckpt.cli.parser``);
- ``reference/summary-json.md``: every field of ``summary.json``, from its pydantic model
  (``dlio_ckpt.results.schema``);
- ``reference/workloads.md``: the packaged workloads, from their YAML files (``configs/workload/``);
- ``performance/reports/*.md``: the dated reports kept in ``bench/results/``, shown as they are.

Nothing generated is written into the repository: the pages exist only in the build.
"""

from __future__ import annotations

import argparse
import html
import re
import subprocess
import sys
import types
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[2]
REPORTS = ROOT / "bench" / "results"
WORKLOADS = ROOT / "configs" / "workload"


def on_files(files: Files, config: Any) -> Files:
    for uri, text in (("reference/keys.md", keys_page()), ("reference/commands.md", commands_page()),
                      ("reference/summary-json.md", summary_page()),
                      ("reference/workloads.md", workloads_page())):
        files.append(File.generated(config, uri, content=text))
    for report in sorted(REPORTS.glob("*.md")):
        files.append(File.generated(config, f"performance/reports/{report.name}", content=report.read_text()))
    return files


def on_config(config: Any) -> Any:
    config.watch.extend([str(REPORTS), str(WORKLOADS)])  # mkdocs serve: a new report or workload shows up
    return config


# -- text in a table cell --------------------------------------------------------------------------

def cell(text: Any) -> str:
    """Plain text as one Markdown table cell: no pipes, no HTML, no emphasis by accident."""
    text = html.escape(str(text), quote=False).replace("|", "&#124;").replace("\n", " ")
    return text.replace("*", "\\*").replace("_", "\\_")


def code(text: Any) -> str:
    """Text as code in a table cell (a pipe cannot be escaped inside backticks: then plain)."""
    text = str(text)
    return f"`{text}`" if "|" not in text and "`" not in text else f"<code>{cell(text)}</code>"


# -- the workload's keys ---------------------------------------------------------------------------

KEY_LINE = re.compile(r"^\+\+(?P<key>\S+)  \((?P<rules>.*); default (?P<default>.*)\)$")


def keys_text() -> str:
    """What ``dlio_ckpt keys`` prints: the command itself, run by this Python (the one mkdocs runs in)."""
    return subprocess.run([sys.executable, "-m", "dlio_ckpt", "keys"], check=True, capture_output=True,
                          text=True, cwd=ROOT).stdout


def section_docs() -> dict[str, str]:
    """Each section's dotted prefix (``workload.checkpoint``) → its model's docstring, where it has one."""
    from pydantic import BaseModel

    from dlio_ckpt.config.schema import Section, Workload

    docs: dict[str, str] = {}

    def walk(model: type[BaseModel], prefix: str) -> None:
        for name, field in model.model_fields.items():
            ann = field.annotation
            args = get_args(ann)
            item = args[0] if get_origin(ann) is list and args else None
            for sub, path in ((ann, f"{prefix}.{name}"), (item, f"{prefix}.{name}[N]")):
                if isinstance(sub, type) and issubclass(sub, BaseModel):
                    if sub.__doc__ and sub.__doc__ is not Section.__doc__:
                        docs[path] = " ".join(sub.__doc__.split())
                    walk(sub, path)

    walk(Workload, "workload")
    return docs


def _model_of(ann: Any) -> Any:
    """The section model a field holds, ``Moe | None`` included; None for a plain value."""
    from pydantic import BaseModel

    unions = get_args(ann) if get_origin(ann) in (Union, types.UnionType) else ()
    for sub in (ann, *[a for a in unions if a is not type(None)]):
        if isinstance(sub, type) and issubclass(sub, BaseModel):
            return sub
    return None


def model_keys() -> list[tuple[str, Any]]:
    """(dotted key, field) of every value key of the workload's models, optional sections included."""
    from dlio_ckpt.config.schema import Workload

    found: list[tuple[str, Any]] = []

    def walk(model: Any, prefix: str) -> None:
        for name, field in model.model_fields.items():
            key, sub = f"{prefix}.{name}", _model_of(field.annotation)
            args = get_args(field.annotation)
            item = _model_of(args[0]) if get_origin(field.annotation) is list and args else None
            if sub is not None:
                walk(sub, key)
            else:
                found.append((key, field))
                if item is not None:
                    walk(item, f"{key}[N]")

    walk(Workload, "workload")
    return found


def _rules(field: Any) -> str:
    """A field's type and constraints, as ``dlio_ckpt keys`` words them."""
    ann = field.annotation
    kind = ("one of " + "|".join(map(str, get_args(ann)))) if get_origin(ann) is Literal else \
        getattr(ann, "__name__", None) or str(ann).replace("typing.", "")
    signs = (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<"), ("multiple_of", "a multiple of"))
    rules = [f"{sign} {getattr(m, attr)}" for m in field.metadata for attr, sign in signs
             if getattr(m, attr, None) is not None]
    return ", ".join([kind, *rules])


def keys_page() -> str:
    rows: dict[str, list[tuple[str, str, str, str]]] = {}
    key = None
    for line in keys_text().splitlines():
        match = KEY_LINE.match(line)
        if match:
            key = match["key"]
            section = key.rsplit(".", 1)[0]
            rows.setdefault(section, []).append((key, match["rules"], match["default"], ""))
        elif line.startswith("      ") and key:
            section = key.rsplit(".", 1)[0]
            k, r, d, _ = rows[section][-1]
            rows[section][-1] = (k, r, d, line.strip())
        elif line.strip():
            raise ValueError(f"dlio_ckpt keys printed a line this page cannot read: {line!r}")
    listed = {k for items in rows.values() for k, *_ in items}
    walked = model_keys()
    extra = sorted({key.rsplit(".", 1)[0] for key, _ in walked if key not in listed})
    for key, field in walked:  # keys the models have that `dlio_ckpt keys` does not list (an optional section)
        if key not in listed:
            rows.setdefault(key.rsplit(".", 1)[0], []).append(
                (key, _rules(field), "required" if field.is_required() else repr(field.get_default()),
                 field.description or ""))
    place = {key: i for i, (key, _) in enumerate(walked)}

    def position(section: str) -> float:  # the models' order; a section below a dict key right after that key
        keys = [k for k, *_ in rows[section]]
        return min(place.get(k, place.get(k.rsplit(".", 1)[0], len(place)) + 0.5) for k in keys)

    rows = {section: rows[section] for section in sorted(rows, key=position)}
    docs = section_docs()
    total = sum(len(r) for r in rows.values())
    out = ["# Workload keys", "",
           f"Every key a workload takes ({total} of them), generated at build time from what "
           "`dlio_ckpt keys` prints (it reads the configuration's pydantic models, and each backend's own "
           "options model for the storage options). Set a key with an override, "
           "`++workload.SECTION.KEY=VALUE`, or in a workload YAML (`--config-dir DIR` adds "
           "`DIR/workload/NAME.yaml`). An unknown key, a wrong type or a broken rule is "
           "one message naming key, value and rule, exit status 2, before anything is written. Rules that "
           "read several sections at once (a layout's keys, MoE's, the tiers') are checked too; they are "
           "described in the guides.", "",
           "`dlio_ckpt keys SECTION` prints one section at a terminal."
           + (f" Keys of {', '.join(f'`{s}`' for s in extra)} are read from the models here: `dlio_ckpt keys` does "
              "not list them yet." if extra else ""), ""]
    for section, items in rows.items():
        out += [f"## `{section}`", ""]
        if section in docs:
            out += [docs[section], ""]
        out += ["| key | type and rules | default | meaning |", "|---|---|---|---|"]
        for k, r, d, meaning in items:
            out.append(f"| {code(k)} | {cell(r)} | {code(d)} | {cell(meaning)} |")
        out.append("")
    return "\n".join(out)


# -- the commands ----------------------------------------------------------------------------------

def _value(action: argparse.Action) -> str:
    if action.nargs == 0:
        return ""
    if action.choices:
        return " \\| ".join(f"`{c}`" for c in action.choices).replace(" \\| ", " &#124; ")
    return code(action.metavar or action.dest.upper())


def _default(action: argparse.Action) -> str:
    if action.nargs == 0 or action.default in (None, argparse.SUPPRESS):
        return ""
    return code(action.default)


def commands_page() -> str:
    from dlio_ckpt.cli.parser import COMMANDS, build_parsers

    parsers = build_parsers()
    out = ["# Commands", "",
           "Every command and flag, generated at build time from the argparse parsers "
           "(`dlio_ckpt/cli/parser.py`). `dlio_ckpt` is the console script; `python -m dlio_ckpt` is the same. "
           "Under MPI, start it with the environment's own `mpiexec` (`.venv/bin/mpiexec -n N .venv/bin/python -m "
           "dlio_ckpt ...`); without one it runs a world of one process. Bad input is exit status 2; `diff`, "
           "`check`, `sweep` and `tune` exit 1 when what they judge fails.", "",
           "## `dlio_ckpt --help`", "", "```text", parsers.top.format_help().rstrip(), "```", ""]
    for name, command in COMMANDS.items():
        parser = parsers.commands[name]
        out += [f"## `{name}`", "", command.summary[0].upper() + command.summary[1:] + ".", "",
                "```text", "usage: " + command.usage, "```", ""]
        for group in parser._action_groups:
            actions = [a for a in group._group_actions if not isinstance(a, argparse._HelpAction)]
            if not actions:
                continue
            title = {"positional arguments": "Arguments", "options": "Options"}.get(group.title or "", group.title)
            out += [f"**{title}**" + (f": {group.description}" if group.description else ""), "",
                    "| argument | value | default | meaning |", "|---|---|---|---|"]
            for action in actions:
                names = ", ".join(f"`{s}`" for s in action.option_strings) or f"`{action.metavar or action.dest}`"
                out.append(f"| {names} | {_value(action) if action.option_strings else ''} | {_default(action)} | "
                           f"{cell(action.help or '')} |")
            out.append("")
    return "\n".join(out)


# -- summary.json ----------------------------------------------------------------------------------

def _type(ann: Any) -> tuple[str, list[tuple[str, Any]]]:
    """A field's type in words, and the models under it with the suffix their path takes (``[]``, ``.{key}``)."""
    from pydantic import BaseModel

    origin, args = get_origin(ann), get_args(ann)
    if origin in (Union, types.UnionType):
        parts = [_type(a) for a in args if a is not type(None)]
        return " or ".join(p[0] for p in parts), [m for p in parts for m in p[1]]
    if origin is Literal:
        return " or ".join(f'"{a}"' for a in args), []
    if origin is list:
        inner, models = _type(args[0]) if args else ("any", [])
        return f"list of {inner}", [("[]" + s, m) for s, m in models]
    if origin is dict:
        inner, models = _type(args[1]) if len(args) > 1 else ("any", [])
        return f"object of {inner}", [(".{name}" + s, m) for s, m in models]
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return "object", [("", ann)]
    if ann is Any:
        return "any", []
    return getattr(ann, "__name__", str(ann)), []


def summary_page() -> str:
    from dlio_ckpt.results.schema import FailedSummary, Section, Summary

    out = ["# `summary.json`", "",
           "Every field of a run's `summary.json`, generated at build time from its pydantic model "
           "(`dlio_ckpt/results/schema.py`), which the writer and every reader (`diff`, `report`, `check`, "
           "sweeps) share. The file is strict JSON (no NaN). A field that does not apply to a run is absent, "
           "not `null` (a few say `null` as a value, and say so). DLIO's keys keep DLIO's names, nesting and "
           "types, so DLIO's readers read it, and DLIO's own summaries load here: `metric`'s `_GB` figures "
           "are GiB, as in DLIO; ours are named by their unit. Keys not listed are kept as they are.", "",
           "[How to read it](../getting-started/first-run.md#read-summaryjson) in a few lines; "
           "the run folder's other files: [Output files](output.md).", ""]
    seen: set[tuple[str, type]] = set()

    def emit(path: str, model: type, depth: int, title: str = "") -> None:
        if (path, model) in seen:
            return
        seen.add((path, model))
        doc = " ".join((model.__doc__ or "").split()) if model.__doc__ is not Section.__doc__ else ""
        title = title or (f"`{path}`" if path else "The top level")
        out.extend([f"## {title}", ""] + ([doc, ""] if doc else []))
        out.extend(["| field | type | description |", "|---|---|---|"])
        later: list[tuple[str, type]] = []
        for name, field in model.model_fields.items():
            key = field.alias or name
            kind, models = _type(field.annotation)
            full = f"{path}.{key}" if path else key
            desc = field.description or ""
            if models:
                desc += " (below)"
            out.append(f"| {code(full)} | {cell(kind)} | {cell(desc)} |")
            later += [(full + suffix, m) for suffix, m in models]
        out.append("")
        for sub_path, sub in later:
            emit(sub_path, sub, depth + 1)

    emit("", Summary, 0)
    seen.clear()
    emit("", FailedSummary, 0, "A failed run's `summary.json`")
    return "\n".join(out)


# -- the workloads ---------------------------------------------------------------------------------

def workloads_page() -> str:
    import yaml

    out = ["# Workloads", "",
           "The workloads shipped in `configs/workload/`, generated at build time from their YAML files (what each "
           "file sets; a key it leaves out takes its [default](keys.md)). Pick one with `workload=NAME`; "
           "`--config-dir DIR` adds your own `DIR/workload/NAME.yaml`, searched first. Each description below says "
           "how many ranks its job has where it matters (MLPerf Storage's process counts for `llama3_*`); run a "
           "large job on fewer processes with `--world-size`.", "",
           "| workload | family | layers | hidden | TP | PP | EP | ZeRO | layout | writes / reads |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    notes = []
    for path in sorted(WORKLOADS.glob("*.yaml")):
        text = path.read_text()
        data = yaml.safe_load(text) or {}
        model, ck = data.get("model", {}), data.get("checkpoint", {})
        par, tr = model.get("parallelism", {}), model.get("transformer", {})
        row = [f"`{path.stem}`", model.get("family", "dense"), model.get("num_layers", ""), tr.get("hidden_size", ""),
               par.get("tensor", 1), par.get("pipeline", 1), par.get("expert", 1), par.get("zero_stage", 0),
               ck.get("layout", "dlio") if data.get("mode", "emulated") == "emulated" else f"mode={data['mode']}",
               f"{ck.get('num_checkpoints_write', 1)} / {ck.get('num_checkpoints_read', 0)}"]
        out.append("| " + " | ".join(cell(v) if i else v for i, v in enumerate(row)) + " |")
        comment = " ".join(line.lstrip("#").strip() for line in text.splitlines() if line.startswith("#"))
        if comment:
            notes += [f"`{path.stem}`", f":   {cell(comment)}", ""]
    return "\n".join(out + ["", "## What each one is", "", *notes])
