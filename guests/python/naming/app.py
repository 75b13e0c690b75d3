"""Sample naming policy in Python: ``<prefix>-<sanitised name>-<hash>``.

The same policy as the Rust sample (guests/naming), passing the same case
file. Settings: ``prefix`` (default ``pv``) and ``max-length`` (16 to 128,
default 128). The hash of the volume's id keeps two volumes with the same
operator name apart on the backend.
"""

from berth_policy import get, number_setting, sanitize, stable_hash
from componentize_py_types import Err
from wit_world import exports
from wit_world.exports.naming import NamingRequest

CSI_NAME_LIMIT = 128


class Naming(exports.Naming):
    def volume_name(self, request: NamingRequest) -> str:
        settings = request.settings
        prefix = sanitize(get(settings, "prefix") or "pv")
        if not prefix:
            raise Err('setting "prefix" has no letters or digits')
        try:
            max_len = number_setting(settings, "max-length", CSI_NAME_LIMIT)
        except ValueError as e:
            raise Err(str(e))
        if not 16 <= max_len <= CSI_NAME_LIMIT:
            raise Err(f'setting "max-length" must be 16 to 128, not {max_len}')
        digest = f"{stable_hash(request.volume.id) & 0xFFFFFFFF:08x}"
        room = max_len - len(prefix) - len(digest) - 2
        if room <= 0:
            raise Err(f"prefix {prefix!r} leaves no room for the volume name within {max_len} bytes")
        body = sanitize(request.volume.name) or "vol"
        body = body[:room].rstrip("-")
        return f"{prefix}-{body}-{digest}"
