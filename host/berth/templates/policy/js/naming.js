import { get, sanitize, shortHash } from "berth-policy";

// CSI allows names of up to 128 bytes.
const MAX_NAME = 128;
const MAX_PREFIX = 32;

/**
 * `<prefix>-<volume name>-<hash of its id>`: the hash keeps two volumes with
 * the same operator name apart on the backend. Throwing refuses the volume.
 * @type {import("berth-policy").Naming}
 */
export const naming = {
  volumeName(request) {
    const prefix = sanitize(get(request.settings, "prefix") ?? "pv");
    if (!prefix || prefix.length > MAX_PREFIX) {
      throw new Error(`setting "prefix" needs 1 to ${MAX_PREFIX} letters or digits`);
    }
    const digest = shortHash(request.volume.id);
    const body = (sanitize(request.volume.name) || "vol")
      .slice(0, MAX_NAME - prefix.length - digest.length - 2)
      .replace(/-+$/, "");
    return `${prefix}-${body}-${digest}`;
  },
};
