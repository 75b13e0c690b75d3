# Admission, from the module's settings (each optional): `max-volumes` a
# namespace may hold, `max-bytes` one volume may ask for, `plugins` a new
# volume may use (separated by ','), `required-labels` a new volume must
# carry (separated by ','); and every new volume gets an `owner` label
# naming its namespace when its caller gave none. The same policy as the
# Rust sample (guests/admission), passing the same case file.

from berth_policy import get, list_setting, number_setting
from wit_world import exports
from wit_world.exports.admission import (
    AdmissionRequest,
    Call_CreateVolume,
    Call_ExpandVolume,
    Change_Label,
    FieldChange,
    Verdict_Allow,
    Verdict_AllowWith,
    Verdict_Deny,
)

UNLIMITED = 2**64 - 1


class Admission(exports.Admission):
    def admit(self, request: AdmissionRequest):
        settings = request.settings
        try:
            max_volumes = number_setting(settings, "max-volumes", UNLIMITED)
            max_bytes = number_setting(settings, "max-bytes", UNLIMITED)
        except ValueError as e:
            return Verdict_Deny(f"bad setting: {e}")
        call, volume = request.call, request.volume
        if isinstance(call, Call_ExpandVolume) and call.value > max_bytes:
            return Verdict_Deny(f"{call.value} bytes is more than the {max_bytes} a volume may have")
        if not isinstance(call, Call_CreateVolume):
            return Verdict_Allow()
        if request.usage.volumes >= max_volumes:
            return Verdict_Deny(f"namespace {request.namespace} holds {request.usage.volumes} volumes, its most")
        if volume.capacity.required_bytes > max_bytes:
            return Verdict_Deny(
                f"{volume.capacity.required_bytes} bytes is more than the {max_bytes} a volume may have"
            )
        plugins = list_setting(settings, "plugins")
        if plugins is not None and request.plugin not in plugins:
            return Verdict_Deny(f"plugin {request.plugin} is not one of {plugins}")
        for key in list_setting(settings, "required-labels") or []:
            if get(volume.labels, key) is None:
                return Verdict_Deny(f"a volume needs the label {key}")
        if get(volume.labels, "owner") is not None:
            return Verdict_Allow()
        owner = FieldChange(
            change=Change_Label(("owner", request.namespace)),
            reason="every volume names its owner; the namespace, unless told",
        )
        return Verdict_AllowWith([owner])
