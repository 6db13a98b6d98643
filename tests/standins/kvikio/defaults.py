"""kvikio.defaults stand-in: settings kept in a dict; AUTO compat mode resolves to cuFile."""

_settings = {"compat_mode": "CompatMode.AUTO", "num_threads": 1, "task_size": 4 << 20, "gds_threshold": 1 << 20}


def set(config, value=None):  # noqa: A001 (kvikio's name)
    _settings.update(config if isinstance(config, dict) else {config: value})


def get(name):
    return _settings[name]


def is_compat_mode_preferred():
    return _settings["compat_mode"] is True
