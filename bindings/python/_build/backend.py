"""A PEP 517 build backend for agentstream-protocol that needs only the
standard library: it writes the wheel (a zip of the package and its
dist-info) itself, so the package builds where PyPI cannot be reached.
It reads the name and version from pyproject.toml."""

import base64
import hashlib
import os
import tomllib
import zipfile

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_PACKAGE = "agentstream_protocol"


def _project():
    with open(os.path.join(_ROOT, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)["project"]


def _dist_name(p):
    return p["name"].replace("-", "_")


def _metadata(p):
    return (
        "Metadata-Version: 2.1\n"
        f"Name: {p['name']}\n"
        f"Version: {p['version']}\n"
        f"Summary: {p['description']}\n"
        f"Requires-Python: {p['requires-python']}\n"
    )


def _record_line(path, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path},sha256={digest},{len(data)}"


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    p = _project()
    base = f"{_dist_name(p)}-{p['version']}"
    name = f"{base}-py3-none-any.whl"
    info = f"{base}.dist-info"
    files = []
    pkg_dir = os.path.join(_ROOT, _PACKAGE)
    for fn in sorted(os.listdir(pkg_dir)):
        if fn.endswith(".py") or fn == "py.typed":
            with open(os.path.join(pkg_dir, fn), "rb") as f:
                files.append((f"{_PACKAGE}/{fn}", f.read()))
    files.append((f"{info}/METADATA", _metadata(p).encode()))
    files.append((f"{info}/WHEEL", b"Wheel-Version: 1.0\nGenerator: agentstream-backend\nRoot-Is-Purelib: true\nTag: py3-none-any\n"))
    record = [_record_line(path, data) for path, data in files] + [f"{info}/RECORD,,"]
    files.append((f"{info}/RECORD", ("\n".join(record) + "\n").encode()))
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w", zipfile.ZIP_DEFLATED) as z:
        for path, data in files:
            zi = zipfile.ZipInfo(path, date_time=(1980, 1, 1, 0, 0, 0))
            zi.external_attr = 0o644 << 16
            z.writestr(zi, data, zipfile.ZIP_DEFLATED)
    return name


def build_sdist(sdist_directory, config_settings=None):
    raise NotImplementedError("agentstream-protocol is built as a wheel only")


def get_requires_for_build_wheel(config_settings=None):
    return []
