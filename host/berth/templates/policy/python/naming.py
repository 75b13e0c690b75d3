from berth_policy import get, sanitize, stable_hash
from componentize_py_types import Err
from wit_world.exports.naming import NamingRequest

# CSI allows names of up to 128 bytes.
MAX_NAME = 128
MAX_PREFIX = 32


class Naming(exports.Naming):
    """``<prefix>-<volume name>-<hash of its id>``: the hash keeps two volumes
    with the same operator name apart on the backend."""

    def volume_name(self, request: NamingRequest) -> str:
        prefix = sanitize(get(request.settings, "prefix") or "pv")
        if not prefix or len(prefix) > MAX_PREFIX:
            raise Err(f'setting "prefix" needs 1 to {MAX_PREFIX} letters or digits')
        digest = f"{stable_hash(request.volume.id) & 0xFFFFFFFF:08x}"
        body = sanitize(request.volume.name) or "vol"
        body = body[: MAX_NAME - len(prefix) - len(digest) - 2].rstrip("-")
        return f"{prefix}-{body}-{digest}"
