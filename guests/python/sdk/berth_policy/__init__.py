"""Write Berth policy modules in Python.

A policy is a module (``app.py``) holding a class per decision it serves,
``Naming``, ``Placement``, ``Retry`` or ``Admission``, each subclassing the protocol that
componentize-py generates from Berth's WIT package (``wit_world.exports``).
componentize-py turns the module into a WebAssembly component Berth loads
like any other; the same module runs natively under
``python -m berth_policy.cases`` against a case file, for unit tests.

The helpers here work on plain values (pairs are lists of ``(key, value)``
tuples), so they import nothing from the generated bindings and work in a
component built for any one decision.
"""

from __future__ import annotations

from typing import Iterable, List, Optional, Sequence, Tuple

Pairs = List[Tuple[str, str]]

__all__ = [
    "Pairs",
    "VerdictsBuilder",
    "backoff_ms",
    "change_text",
    "code_name",
    "get",
    "health_of",
    "is_undo",
    "label_sets",
    "list_setting",
    "number_setting",
    "operation_name",
    "parse_pairs",
    "reachable",
    "sanitize",
    "satisfies",
    "stable_hash",
    "topologies",
]


def get(pairs: Iterable[Tuple[str, str]], key: str) -> Optional[str]:
    """The value of ``key`` in a list of pairs (settings, labels, topology)."""
    for k, v in pairs:
        if k == key:
            return v
    return None


def _ranges(candidates, offsets: Sequence[int]) -> List[Pairs]:
    strings, keys, values = candidates.strings, candidates.pair_keys, candidates.pair_values
    return [
        [(strings[keys[p]], strings[values[p]]) for p in range(start, end)]
        for start, end in zip(offsets, offsets[1:])
    ]


def topologies(candidates) -> List[Pairs]:
    """Placement's distinct topologies as pairs, in the order the per-node
    ``topology`` column indexes them: judge each once, then each node by
    its index."""
    return _ranges(candidates, candidates.topologies)


def label_sets(candidates) -> List[Pairs]:
    """Placement's distinct label sets as pairs, in the order the per-node
    ``labels`` column indexes them."""
    return _ranges(candidates, candidates.label_sets)


# The order of the ``health`` enum's cases, which the ``health`` column carries.
_HEALTH = ("healthy", "unhealthy", "unknown")


def health_of(candidates, i: int) -> str:
    """Node ``i``'s health: ``"healthy"``, ``"unhealthy"`` or ``"unknown"``."""
    h = candidates.health[i]
    return _HEALTH[h] if h < len(_HEALTH) else "unknown"


def number_setting(settings: Pairs, key: str, default: int) -> int:
    """A setting as a whole number, or ``default`` when absent.

    Raises ``ValueError`` naming the setting when it is not a number.
    """
    value = get(settings, key)
    if value is None:
        return default
    text = value.strip()
    if not text.isdigit():
        raise ValueError(f"setting {key!r} must be a whole number, not {value!r}")
    return int(text)


def list_setting(settings: Pairs, key: str) -> Optional[List[str]]:
    """A setting as a list separated by ``,`` (blanks dropped), or ``None`` when absent."""
    value = get(settings, key)
    if value is None:
        return None
    return [item.strip() for item in value.split(",") if item.strip()]


def change_text(change) -> str:
    """An admission change as ``volume explain`` and the events show it:
    ``label owner=team-a``, ``required-bytes 1073741824``..."""
    kind = type(change).__name__.removeprefix("Change_")
    value = change.value
    if kind in ("Parameter", "Label"):
        return f"{kind.lower()} {value[0]}={value[1]}"
    if kind == "RequisiteTopology":
        each = [",".join(f"{k}={v}" for k, v in t) for t in value]
        return "requisite-topology " + " or ".join(each)
    if kind == "AccessMode":
        return "access-mode " + value.name.lower().replace("_", "-")
    words = {"RequiredBytes": "required-bytes", "LimitBytes": "limit-bytes", "Plugin": "plugin"}
    return f"{words.get(kind, kind)} {value}"


def parse_pairs(text: str) -> Pairs:
    """``k=v,k2=v2`` as pairs; blank input gives none."""
    out: Pairs = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        key, sep, value = part.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"{part!r} is not key=value")
        out.append((key.strip(), value.strip()))
    return out


def satisfies(topology: Pairs, required: Pairs) -> bool:
    """Whether every segment of ``required`` is in ``topology`` with the same value."""
    return all(get(topology, k) == v for k, v in required)


def reachable(topology: Pairs, accessible: Sequence[Pairs]) -> bool:
    """Whether a node in ``topology`` reaches any of ``accessible`` (empty: everywhere)."""
    return not accessible or any(satisfies(topology, t) for t in accessible)


def sanitize(text: str) -> str:
    """Lower-case ASCII letters and digits; runs of anything else become one ``-``."""
    out: List[str] = []
    for c in text:
        if c.isascii() and c.isalnum():
            out.append(c.lower())
        elif out and out[-1] != "-":
            out.append("-")
    return "".join(out).strip("-")


def stable_hash(text: str) -> int:
    """FNV-1a, 64 bits: the same in every run, build and language (Rust's SDK too)."""
    h = 0xCBF29CE484222325
    for b in text.encode("utf-8"):
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def backoff_ms(attempt: int, base: int, maximum: int) -> int:
    """``base * 2^(attempt-1)``, capped at ``maximum``."""
    exp = min(max(attempt - 1, 0), 63)
    return min(base << exp, maximum)


_UNDO = {
    "DELETE_VOLUME",
    "CONTROLLER_UNPUBLISH_VOLUME",
    "NODE_UNSTAGE_VOLUME",
    "NODE_UNPUBLISH_VOLUME",
    "DELETE_SNAPSHOT",
    "DELETE_VOLUME_GROUP_SNAPSHOT",
}


def is_undo(operation) -> bool:
    """Whether an ``Operation`` undoes something, so that NOT_FOUND means done."""
    return operation.name in _UNDO


def operation_name(operation) -> str:
    """The CSI method name of an ``Operation``: ``CreateVolume``, ``NodePublishVolume``..."""
    return "".join(word.capitalize() for word in operation.name.split("_"))


def code_name(code) -> str:
    """The gRPC name of a ``Code``, as the CSI spec writes it: ``NOT_FOUND``..."""
    return code.name


class VerdictsBuilder:
    """A placement answer: every node starts eligible with score 0; each
    distinct reason is sent once, however many nodes it refuses."""

    def __init__(self, nodes: int):
        self.refusals = [0] * nodes
        self.scores = [0] * nodes
        self.reasons: List[str] = []
        self._seen: dict = {}

    def score(self, node: int, score: int) -> None:
        """Among eligible nodes, higher is better."""
        self.scores[node] = score

    def reason(self, text: str) -> int:
        """Adds a reason to refuse any number of nodes for, with ``refuse_for``."""
        self.reasons.append(text)
        return len(self.reasons)

    def refuse_for(self, node: int, reason: int) -> None:
        self.refusals[node] = reason

    def refuse(self, node: int, text: str) -> None:
        """Refuses ``node`` because of ``text``, shared with every node refused for the same."""
        reason = self._seen.get(text)
        if reason is None:
            reason = self._seen[text] = self.reason(text)
        self.refusals[node] = reason

    def finish(self):
        """The ``Verdicts`` record the ``place`` function returns."""
        from wit_world.exports.placement import Verdicts

        return Verdicts(refusals=self.refusals, scores=self.scores, reasons=self.reasons)
