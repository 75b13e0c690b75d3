"""cosign's encrypted private key, sealed and opened without Berth.

scrypt from Python's hashlib and NaCl's secretbox from PyNaCl, as the format
(go-securesystemslib's `encrypted`) specifies them:

    cosign_key.py seal PKCS8_DER PASSWORD OUT   writes OUT as cosign.key
    cosign_key.py open KEY PASSWORD OUT         writes the PKCS#8 DER to OUT
"""

import base64
import hashlib
import json
import os
import sys

import nacl.secret

LABEL = "ENCRYPTED SIGSTORE PRIVATE KEY"


def derive(password, salt, n, r, p):
    return hashlib.scrypt(password, salt=salt, n=n, r=r, p=p, maxmem=256 << 20, dklen=32)


def seal(der, password):
    salt, nonce = os.urandom(32), os.urandom(24)
    box = nacl.secret.SecretBox(derive(password, salt, 32768, 8, 1))
    sealed = {
        "kdf": {"name": "scrypt", "params": {"N": 32768, "r": 8, "p": 1}, "salt": base64.b64encode(salt).decode()},
        "cipher": {"name": "nacl/secretbox", "nonce": base64.b64encode(nonce).decode()},
        "ciphertext": base64.b64encode(box.encrypt(der, nonce).ciphertext).decode(),
    }
    body = base64.b64encode(json.dumps(sealed).encode()).decode()
    lines = [body[i : i + 64] for i in range(0, len(body), 64)]
    return "\n".join([f"-----BEGIN {LABEL}-----", *lines, f"-----END {LABEL}-----", ""])


def open_key(text, password):
    body = text.split(f"-----BEGIN {LABEL}-----")[1].split(f"-----END {LABEL}-----")[0]
    sealed = json.loads(base64.b64decode("".join(body.split())))
    assert sealed["kdf"]["name"] == "scrypt" and sealed["cipher"]["name"] == "nacl/secretbox"
    params = sealed["kdf"]["params"]
    key = derive(password, base64.b64decode(sealed["kdf"]["salt"]), params["N"], params["r"], params["p"])
    box = nacl.secret.SecretBox(key)
    return box.decrypt(base64.b64decode(sealed["ciphertext"]), base64.b64decode(sealed["cipher"]["nonce"]))


def main():
    command, source, password, out = sys.argv[1:5]
    password = password.encode()
    if command == "seal":
        with open(source, "rb") as f, open(out, "w") as o:
            o.write(seal(f.read(), password))
    else:
        with open(source) as f, open(out, "wb") as o:
            o.write(open_key(f.read(), password))


main()
