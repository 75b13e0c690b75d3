// Sample admission policy in JavaScript: the same as the Rust sample
// (guests/admission), passing the same case file.
//
// Settings, each optional: `max-volumes` a namespace may hold, `max-bytes`
// one volume may ask for, `plugins` a new volume may use and
// `required-labels` it must carry (each separated by ','); a new volume
// without an `owner` label gets its namespace's name.

import { get, listSetting, numberSetting } from "berth-policy";

/** @type {import("berth-policy").Admission} */
export const admission = {
  admit(request) {
    const settings = request.settings;
    let maxVolumes, maxBytes;
    try {
      maxVolumes = numberSetting(settings, "max-volumes", Infinity);
      maxBytes = numberSetting(settings, "max-bytes", Infinity);
    } catch (e) {
      return { tag: "deny", val: `bad setting: ${e.message}` };
    }
    const { call, volume } = request;
    if (call.tag === "expand-volume" && call.val > maxBytes) {
      return { tag: "deny", val: `${call.val} bytes is more than the ${maxBytes} a volume may have` };
    }
    if (call.tag !== "create-volume") return { tag: "allow" };
    if (request.usage.volumes >= maxVolumes) {
      return { tag: "deny", val: `namespace ${request.namespace} holds ${request.usage.volumes} volumes, its most` };
    }
    const asked = volume.capacity.requiredBytes;
    if (asked > maxBytes) {
      return { tag: "deny", val: `${asked} bytes is more than the ${maxBytes} a volume may have` };
    }
    const plugins = listSetting(settings, "plugins");
    if (plugins !== undefined && !plugins.includes(request.plugin)) {
      return { tag: "deny", val: `plugin ${request.plugin} is not one of ${JSON.stringify(plugins)}` };
    }
    for (const key of listSetting(settings, "required-labels") ?? []) {
      if (get(volume.labels, key) === undefined) {
        return { tag: "deny", val: `a volume needs the label ${key}` };
      }
    }
    if (get(volume.labels, "owner") !== undefined) return { tag: "allow" };
    const owner = {
      change: { tag: "label", val: ["owner", request.namespace] },
      reason: "every volume names its owner; the namespace, unless told",
    };
    return { tag: "allow-with", val: [owner] };
  },
};
