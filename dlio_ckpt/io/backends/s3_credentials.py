"""Explicit S3 keys (``storage_options.access_key_id``, ``secret_access_key``, ``session_token``) handed
to each client of one storage, and never to the process environment.

Why: put into ``os.environ`` they reached every child process (mpiexec's, fio's, a framework's
workers) and every library, and two S3 tiers with different keys overwrote each other's. botocore
(``Session.create_client(aws_access_key_id=...)``) and s3fs (``S3FileSystem(key=, secret=, token=)``)
take keys as arguments. The CRT client of s3torchconnector 1.5.0 (``MountpointS3Client``, which
s3torchconnector's own ``S3Client`` builds for DCP and Lightning) takes none: only ``profile``,
``unsigned`` or the AWS default chain. So for the CRT the keys become a profile of their own in a
credentials file that exists only in this process's memory (a ``memfd``, close-on-exec: no child
inherits it), and the client is built with that profile name while ``AWS_SHARED_CREDENTIALS_FILE``
names the file, for the constructor's duration only: the CRT reads the variable once, when it makes
its profile provider, and the file itself each time it signs (a client built that
way keeps working after the variable is gone, and fails once the file is closed). The file therefore
lives as long as the keys; the variable holds a path, never a secret.
"""

from __future__ import annotations

import os
import secrets
import tempfile
import threading
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

from pydantic import SecretStr

T = TypeVar("T")
_VARIABLE = "AWS_SHARED_CREDENTIALS_FILE"
_ENVIRONMENT = threading.Lock()  # one client built at a time while the variable names a private file


class S3Keys:
    """One storage's explicit keys, given to each kind of client in the form it takes. Never printed:
    its repr names the access key id only (an identifier that S3's own errors show too)."""

    def __init__(self, access_key_id: str, secret_access_key: SecretStr, session_token: SecretStr | None) -> None:
        self.access_key_id = access_key_id
        self._secret, self._token = secret_access_key, session_token
        self._file: _ProfileFile | None = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"S3Keys(access_key_id={self.access_key_id!r}, secret_access_key='***')"

    def botocore(self) -> dict[str, str | None]:
        """``botocore.session.Session.create_client``'s arguments."""
        return {"aws_access_key_id": self.access_key_id, "aws_secret_access_key": self._secret.get_secret_value(),
                "aws_session_token": self._token.get_secret_value() if self._token else None}

    def s3fs(self) -> dict[str, str]:
        """``s3fs.S3FileSystem``'s arguments (and so fsspec's storage options for ``s3://``)."""
        out = {"key": self.access_key_id, "secret": self._secret.get_secret_value()}
        return out | ({"token": self._token.get_secret_value()} if self._token else {})

    @property
    def profile(self) -> str:
        """The name of this storage's own profile, for a CRT client built inside :meth:`visible`."""
        return self._profile_file().profile

    @contextmanager
    def visible(self) -> Iterator[str]:
        """While a CRT client is built: ``AWS_SHARED_CREDENTIALS_FILE`` names this storage's private
        credentials file (any earlier value comes back afterwards); yields the profile to build with."""
        file = self._profile_file()
        with _ENVIRONMENT:
            before = os.environ.get(_VARIABLE)
            os.environ[_VARIABLE] = file.path
            try:
                yield file.profile
            finally:
                if before is None:
                    del os.environ[_VARIABLE]
                else:
                    os.environ[_VARIABLE] = before

    def _profile_file(self) -> _ProfileFile:
        with self._lock:
            if self._file is None:
                text = (f"aws_access_key_id = {self.access_key_id}\n"
                        f"aws_secret_access_key = {self._secret.get_secret_value()}\n")
                if self._token:
                    text += f"aws_session_token = {self._token.get_secret_value()}\n"
                self._file = _ProfileFile(text)
            return self._file


class _ProfileFile:
    """A credentials file holding one profile with a random name, readable by this process alone: a
    close-on-exec ``memfd`` read through ``/proc/self/fd`` on Linux; elsewhere a file of mode 0600 in a
    private temporary folder. Either is gone when this object is (or at exit)."""

    def __init__(self, body: str) -> None:
        self.profile = f"dlio-ckpt-{secrets.token_hex(6)}"
        data = f"[{self.profile}]\n{body}".encode()
        if hasattr(os, "memfd_create") and os.path.isdir("/proc/self/fd"):
            fd = os.memfd_create("dlio_ckpt_s3_credentials", os.MFD_CLOEXEC)
            os.write(fd, data)
            self.path = f"/proc/self/fd/{fd}"
            self._finalizer: weakref.finalize[..., _ProfileFile] = weakref.finalize(self, os.close, fd)
            return
        folder = tempfile.mkdtemp(prefix="dlio_ckpt_s3_")  # mode 0700
        self.path = os.path.join(folder, "credentials")
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        self._finalizer = weakref.finalize(self, _remove, folder, self.path)


def _remove(folder: str, path: str) -> None:
    for remove, target in ((os.unlink, path), (os.rmdir, folder)):
        try:
            remove(target)
        except OSError:
            pass


def build_with(keys: S3Keys | None, build: Callable[[str | None], T], profile: str | None = None) -> T:
    """``build(profile)`` for a CRT client: with ``keys``, inside :meth:`S3Keys.visible` and with their
    private profile; without, as asked (``profile`` or the AWS default chain)."""
    if keys is None:
        return build(profile)
    with keys.visible() as private:
        return build(private)
