"""kvikio.cufile_driver stand-in: cuFile loaded, GDS unavailable (no nvidia-fs module)."""


def get(name):
    return {"is_gds_available": False, "allow_compat_mode": True}[name]
