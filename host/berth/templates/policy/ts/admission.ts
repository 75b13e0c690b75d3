import { get, listSetting, numberSetting, type Admission, type Verdict } from "berth-policy";

const deny = (val: string): Verdict => ({ tag: "deny", val });

/**
 * A namespace holds at most `max-volumes`; a volume asks for at most
 * `max-bytes`, on one of `plugins`, carrying `required-labels` (each
 * setting optional, lists separated by ','); a new volume without an
 * `owner` label gets its namespace's name.
 */
export const admission: Admission = {
  admit(request) {
    const { call, settings, usage, volume } = request;
    let maxVolumes: number;
    let maxBytes: number;
    try {
      maxVolumes = numberSetting(settings, "max-volumes", Infinity);
      maxBytes = numberSetting(settings, "max-bytes", Infinity);
    } catch (e) {
      return deny(`bad setting: ${(e as Error).message}`);
    }
    if (call.tag === "expand-volume" && call.val > maxBytes) {
      return deny(`${call.val} bytes is more than the ${maxBytes} a volume may have`);
    }
    if (call.tag !== "create-volume") return { tag: "allow" };
    if (usage.volumes >= maxVolumes) {
      return deny(`namespace ${request.namespace} holds ${usage.volumes} volumes, its most`);
    }
    if (volume.capacity.requiredBytes > maxBytes) {
      return deny(`${volume.capacity.requiredBytes} bytes is more than the ${maxBytes} a volume may have`);
    }
    const plugins = listSetting(settings, "plugins");
    if (plugins !== undefined && !plugins.includes(request.plugin)) {
      return deny(`plugin ${request.plugin} is not one of ${JSON.stringify(plugins)}`);
    }
    const missing = (listSetting(settings, "required-labels") ?? []).find((k) => get(volume.labels, k) === undefined);
    if (missing !== undefined) return deny(`a volume needs the label ${missing}`);
    if (get(volume.labels, "owner") !== undefined) return { tag: "allow" };
    const reason = "every volume names its owner; the namespace, unless told";
    return { tag: "allow-with", val: [{ change: { tag: "label", val: ["owner", request.namespace] }, reason }] };
  },
};
