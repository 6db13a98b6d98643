"""cupy.cuda stand-in: one device, selection is a no-op context manager."""

import threading

_current = threading.local()


class Device:
    def __init__(self, index=0):
        self.id = index

    def use(self):
        _current.id = self.id

    def __enter__(self):
        self._previous = getattr(_current, "id", 0)
        _current.id = self.id
        return self

    def __exit__(self, *exc):
        _current.id = self._previous


class runtime:  # noqa: N801 (cupy's name)
    device_count = 1

    @staticmethod
    def getDeviceCount():  # noqa: N802 (cupy's name)
        return runtime.device_count

    @staticmethod
    def deviceSynchronize():  # noqa: N802 (cupy's name)
        pass


def current_device() -> int:
    return getattr(_current, "id", 0)
