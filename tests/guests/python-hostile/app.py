"""A Python policy module that misbehaves in the way its ``behaviour``
setting names, for the engine's containment tests:

- ``loop``: never returns;
- ``memory-bomb``: allocates until something stops it;
- ``raise``: raises an exception it does not catch;
- ``network``: imports ``socket`` and connects out;
- ``read-file``: opens a file on the host;
- ``environment``: reads the process environment;
- ``subprocess``: starts a program;
- anything else: a well-formed answer.
"""

from berth_policy import VerdictsBuilder, get
from wit_world import exports


def misbehave(settings) -> str:
    behaviour = get(settings, "behaviour") or ""
    if behaviour == "loop":
        n = 0
        while True:
            n += 1
    if behaviour == "memory-bomb":
        hoard = []
        while True:
            hoard.append(bytearray(1 << 20))
    if behaviour == "raise":
        raise RuntimeError("hostile Python guest raised on purpose")
    if behaviour == "network":
        import socket

        socket.create_connection(("192.0.2.1", 80), timeout=1).close()
        return "connected"
    if behaviour == "read-file":
        with open("/etc/hostname") as f:
            return "leaked-" + f.read().strip()
    if behaviour == "environment":
        import os

        return f"env-{len(os.environ)}"
    if behaviour == "subprocess":
        import subprocess

        subprocess.run(["true"])
        return "ran"
    return behaviour


class Naming(exports.Naming):
    def volume_name(self, request) -> str:
        answer = misbehave(request.settings)
        return f"ok-{request.volume.name}" if not answer else f"{answer}-{request.volume.name}"


class Placement(exports.Placement):
    def place(self, request, candidates):
        misbehave(request.settings)
        return VerdictsBuilder(len(candidates.topology)).finish()


class Retry(exports.Retry):
    def classify(self, failure):
        from wit_world.exports.retry import Decision_RetryAfter

        misbehave(failure.settings)
        return Decision_RetryAfter(1000)
