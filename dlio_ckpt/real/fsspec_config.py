"""Hand the storage options of our S3 and GCS backends to fsspec, for frameworks that open
``s3://`` and ``gs://`` URLs themselves (Lightning's TorchCheckpointIO, DCP's FsspecWriter).

Why fsspec's config and not arguments: Lightning calls ``fsspec.url_to_fs(path)`` with no options,
so the endpoint, region and credentials have to be defaults of the protocol.
"""

from __future__ import annotations

from typing import Any

import fsspec

from ..backends import Backend


def storage_options(backend: Backend) -> dict[str, Any]:
    """The fsspec options equivalent to this backend's ``storage_options`` (empty for local files)."""
    o = getattr(backend, "options", None)
    if backend.name == "s3":
        path_style = o.force_path_style if o.force_path_style is not None else o.endpoint_url is not None
        opts: dict[str, Any] = {"client_kwargs": {"region_name": o.region},
                                "config_kwargs": {"s3": {"addressing_style": "path" if path_style else "auto"},
                                                  "retries": {"max_attempts": o.max_attempts}}}
        if o.endpoint_url:
            opts["endpoint_url"] = o.endpoint_url
        if o.profile:
            opts["profile"] = o.profile
        return opts  # credentials: the AWS chain, which the backend filled from storage_options
    if backend.name == "gcs":
        return {"project": o.project, "token": o.token or ("anon" if backend.endpoint else None),
                "endpoint_url": backend.endpoint, "requests_timeout": o.timeout}
    return {}


def configure_fsspec(backend: Backend) -> None:
    protocols = {"s3": ("s3", "s3a"), "gcs": ("gs", "gcs")}.get(backend.name, ())
    for protocol in protocols:
        fsspec.config.conf[protocol] = storage_options(backend)
