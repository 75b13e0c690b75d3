// Sample naming policy in JavaScript: `<prefix>-<sanitised name>-<hash>`.
//
// The same policy as the Rust sample (guests/naming), passing the same case
// file. Settings: `prefix` (default `pv`) and `max-length` (16 to 128,
// default 128). The hash of the volume's id keeps two volumes with the same
// operator name apart on the backend. Throwing refuses the volume: the
// message is the reason shown to the operator.

import { get, numberSetting, sanitize, shortHash } from "berth-policy";

const CSI_NAME_LIMIT = 128;

export const naming = {
  volumeName(request) {
    const settings = request.settings;
    const prefix = sanitize(get(settings, "prefix") ?? "pv");
    if (!prefix) throw new Error('setting "prefix" has no letters or digits');
    const maxLength = numberSetting(settings, "max-length", CSI_NAME_LIMIT);
    if (maxLength < 16 || maxLength > CSI_NAME_LIMIT) {
      throw new Error(`setting "max-length" must be 16 to 128, not ${maxLength}`);
    }
    const digest = shortHash(request.volume.id);
    const room = maxLength - prefix.length - digest.length - 2;
    if (room <= 0) {
      throw new Error(`prefix "${prefix}" leaves no room for the volume name within ${maxLength} bytes`);
    }
    const body = (sanitize(request.volume.name) || "vol").slice(0, room).replace(/-+$/, "");
    return `${prefix}-${body}-${digest}`;
  },
};
