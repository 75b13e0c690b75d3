"""Runs a Berth case file against a Python policy natively, without building
a component: the same file, the same defaults and the same checks as
``berth policy test``.

    python -m berth_policy.cases APP_DIR cases.toml

``APP_DIR`` holds the policy's ``app.py``; the bindings componentize-py
generates for the ``policy`` world must be importable (``PYTHONPATH``).
Exits 1 when a case fails. Needs Python 3.11 or later (``tomllib``).
"""

from __future__ import annotations

import importlib
import sys
import time
import tomllib
from typing import Any, Dict, List, Optional, Tuple

from . import Pairs, change_text

GRPC_CODES = [
    "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND", "ALREADY_EXISTS",
    "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE",
    "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED",
]

EXPECT_KEYS = {
    "naming": {"name", "name_prefix", "max_length", "refused", "refusal_contains"},
    "placement": {"eligible", "best", "reasons"},
    "retry": {"retry_after_ms", "give_up", "give_up_contains", "done"},
    "admission": {"admitted", "denial_contains", "changes"},
}

ADMISSION_KEYS = {
    "call", "node", "bytes", "snapshot", "parameters", "caller", "policies", "namespace", "plugin", "secret",
    "usage",
}
USAGE_KEYS = {"volumes", "bytes", "snapshots"}


class CaseError(Exception):
    pass


def pairs(table: Optional[Dict[str, str]]) -> Pairs:
    return sorted((table or {}).items())


def wit_enum(enum, name: str, what: str):
    try:
        return enum[name.upper().replace("-", "_")]
    except KeyError:
        known = [m.name.lower().replace("_", "-") for m in enum]
        raise CaseError(f"{what} {name!r} is not one of {known}")


def volume(spec: Optional[Dict[str, Any]]):
    from wit_world.imports.types import AccessMode, AccessType, CapacityRange, Volume

    spec = spec or {}
    name = spec.get("name", "example")
    return Volume(
        id=spec.get("id", f"uid-{name}"),
        name=name,
        driver=spec.get("driver", "hostpath.csi.berth.dev"),
        capacity=CapacityRange(
            required_bytes=spec.get("required_bytes", 1 << 30), limit_bytes=spec.get("limit_bytes", 0)
        ),
        access_mode=wit_enum(AccessMode, spec.get("access_mode", "single-node-writer"), "access mode"),
        access_type=wit_enum(AccessType, spec.get("access_type", "mount"), "access type"),
        parameters=pairs(spec.get("parameters")),
        labels=pairs(spec.get("labels")),
        requisite_topology=[pairs(t) for t in spec.get("requisite_topology", [])],
        preferred_topology=[pairs(t) for t in spec.get("preferred_topology", [])],
    )


def candidates(nodes: List[Dict[str, Any]]):
    """The columns Berth sends: each string, topology and label set once."""
    from wit_world.exports.placement import Candidates
    from wit_world.imports.types import Health

    strings: List[str] = []
    keys: List[int] = []
    values: List[int] = []

    def string(s: str) -> int:
        if s not in strings:
            strings.append(s)
        return strings.index(s)

    def sets(items: List[Pairs]) -> Tuple[List[int], List[int]]:
        distinct: List[Pairs] = []
        offsets = [len(keys)]
        index = []
        for p in items:
            if p not in distinct:
                distinct.append(p)
                for k, v in p:
                    keys.append(string(k))
                    values.append(string(v))
                offsets.append(len(keys))
            index.append(distinct.index(p))
        return offsets, index

    topologies, topology = sets([pairs(n.get("topology")) for n in nodes])
    label_sets, labels = sets([pairs(n.get("labels")) for n in nodes])
    return Candidates(
        strings=strings,
        pair_keys=keys,
        pair_values=values,
        topologies=topologies,
        label_sets=label_sets,
        topology=topology,
        labels=labels,
        max_volumes=[n.get("max_volumes", 0) for n in nodes],
        published_volumes=[n.get("published", 0) for n in nodes],
        health=[wit_enum(Health, n.get("health", "healthy"), "health").value for n in nodes],
    )


def check_naming(e: Dict[str, Any], name: Optional[str], refusal: Optional[str]) -> str:
    wants_refusal = e.get("refused") is True or "refusal_contains" in e
    if refusal is not None:
        if not wants_refusal:
            raise CaseError(f"expected a name, got a refusal: {refusal}")
        part = e.get("refusal_contains")
        if part is not None and part not in refusal:
            raise CaseError(f"expected a refusal containing {part!r}, got {refusal!r}")
        return f"refused: {refusal}"
    if wants_refusal:
        raise CaseError(f"expected a refusal, got the name {name!r}")
    if "name" in e and name != e["name"]:
        raise CaseError(f"expected the name {e['name']!r}, got {name!r}")
    if "name_prefix" in e and not name.startswith(e["name_prefix"]):
        raise CaseError(f"expected a name starting {e['name_prefix']!r}, got {name!r}")
    if "max_length" in e and len(name.encode()) > e["max_length"]:
        raise CaseError(f"expected at most {e['max_length']} bytes, got {len(name.encode())} ({name!r})")
    return f"named {name!r}"


def check_placement(e: Dict[str, Any], names: List[str], verdicts) -> str:
    n = len(names)
    if len(verdicts.refusals) != n or len(verdicts.scores) != n:
        raise CaseError(f"{len(verdicts.refusals)} refusals and {len(verdicts.scores)} scores for {n} nodes")
    reason = lambda i: verdicts.reasons[verdicts.refusals[i] - 1] if verdicts.refusals[i] else None
    eligible = [names[i] for i in range(n) if not verdicts.refusals[i]]
    if "eligible" in e and sorted(eligible) != sorted(e["eligible"]):
        raise CaseError(f"expected eligible {sorted(e['eligible'])}, got {sorted(eligible)}")
    ranked = sorted((i for i in range(n) if not verdicts.refusals[i]), key=lambda i: -verdicts.scores[i])
    best = names[ranked[0]] if ranked else None
    if "best" in e and best != e["best"]:
        raise CaseError(f"expected {e['best']!r} to score best, got {best!r}")
    for name, part in e.get("reasons", {}).items():
        if name not in names:
            raise CaseError(f"expect.reasons names {name!r}, which is not a node of this case")
        why = reason(names.index(name))
        if why is None:
            raise CaseError(f"expected {name} refused for a reason containing {part!r}; it is eligible")
        if part not in why:
            raise CaseError(f"expected the reason for {name} to contain {part!r}, got {why!r}")
    return f"eligible {eligible}, best {best!r}"


def check_retry(e: Dict[str, Any], attempt: int, decision) -> str:
    kind = type(decision).__name__
    value = getattr(decision, "value", None)
    shown = {"Decision_RetryAfter": f"retry after {value} ms", "Decision_GiveUp": f"give up: {value}"}.get(
        kind, "done"
    )

    def wrong(want: str):
        raise CaseError(f"expected {want} for attempt {attempt}, got {shown}")

    window = e.get("retry_after_ms")
    if window is not None:
        low, high = (window, window) if isinstance(window, int) else (window["min"], window["max"])
        if kind != "Decision_RetryAfter":
            wrong("a retry")
        if not low <= value <= high:
            wrong(f"{low} ms" if low == high else f"{low} to {high} ms")
    gave_up = kind == "Decision_GiveUp"
    if e.get("give_up") is not None and e["give_up"] != gave_up:
        wrong("no give-up" if gave_up else "a give-up")
    part = e.get("give_up_contains")
    if part is not None and not (gave_up and part in value):
        wrong(f"a give-up containing {part!r}")
    if e.get("done") is True and kind != "Decision_Done":
        wrong("done")
    return shown


def admission_request(given: Optional[Dict[str, Any]], v, settings: Pairs):
    """The request an admission case asks about, with the defaults of ``berth policy test``."""
    from wit_world.exports import admission as a

    i = given or {}
    stray = set(i) - ADMISSION_KEYS
    if stray:
        raise CaseError(f"admission has {sorted(stray)}, which an admission case does not know")
    usage = i.get("usage", {})
    stray = set(usage) - USAGE_KEYS
    if stray:
        raise CaseError(f"admission.usage has {sorted(stray)}; it knows {sorted(USAGE_KEYS)}")
    name = i.get("call", "create-volume")

    def needs(what: str):
        if what not in i:
            raise CaseError(f"a {name} case needs `admission.{what}`")
        return i[what]

    calls = {
        "create-volume": lambda: a.Call_CreateVolume(),
        "publish-volume": lambda: a.Call_PublishVolume(needs("node")),
        "expand-volume": lambda: a.Call_ExpandVolume(needs("bytes")),
        "modify-volume": lambda: a.Call_ModifyVolume(pairs(i.get("parameters"))),
        "create-snapshot": lambda: a.Call_CreateSnapshot(needs("snapshot")),
        "delete-volume": lambda: a.Call_DeleteVolume(),
    }
    if name not in calls:
        raise CaseError(f"admission.call {name!r} is not one of {', '.join(calls)}")
    return a.AdmissionRequest(
        call=calls[name](),
        caller=a.Caller(identity=i.get("caller", "management"), policies=list(i.get("policies", []))),
        namespace=i.get("namespace", "default"),
        plugin=i.get("plugin", "hostpath"),
        volume=v,
        secret=i.get("secret"),
        usage=a.Usage(
            volumes=usage.get("volumes", 0), bytes=usage.get("bytes", 0), snapshots=usage.get("snapshots", 0)
        ),
        settings=settings,
    )


def check_admission(e: Dict[str, Any], verdict) -> str:
    kind = type(verdict).__name__
    changes = [change_text(c.change) for c in verdict.value] if kind == "Verdict_AllowWith" else []
    if kind == "Verdict_Deny":
        admitted, said = False, f"denied: {verdict.value}"
    elif kind == "Verdict_AllowWith":
        admitted, said = True, "admitted with " + "; ".join(changes)
    else:
        admitted, said = True, "admitted"
    want_admitted = e.get("admitted", "denial_contains" not in e)
    if admitted != want_admitted:
        raise CaseError(f"expected {'the request admitted' if want_admitted else 'a denial'}, got: {said}")
    part = e.get("denial_contains")
    if part is not None and kind == "Verdict_Deny" and part not in verdict.value:
        raise CaseError(f"expected a denial containing {part!r}, got {verdict.value!r}")
    if "changes" in e and changes != e["changes"]:
        raise CaseError(f"expected the changes {e['changes']}, got {changes}")
    return said


def run_case(app, settings: Pairs, case: Dict[str, Any]) -> Tuple[str, str]:
    served = [d for d in ("naming", "placement", "retry", "admission") if hasattr(app, d.capitalize())]
    decision = case.get("decision")
    if decision is None:
        if len(served) != 1:
            raise CaseError(f"the module serves {served}; say which with decision = \"...\"")
        decision = served[0]
    elif decision not in served:
        raise CaseError(f"the module does not serve {decision}")
    e = case.get("expect", {})
    stray = set(e) - EXPECT_KEYS[decision]
    if stray:
        raise CaseError(f"expect has {sorted(stray)}, which a {decision} case cannot check")
    v = volume(case.get("volume"))
    if decision == "naming":
        from componentize_py_types import Err
        from wit_world.exports.naming import NamingRequest

        try:
            name, refusal = app.Naming().volume_name(NamingRequest(v, settings)), None
        except Err as refused:
            name, refusal = None, refused.value
        return decision, check_naming(e, name, refusal)
    if decision == "placement":
        from wit_world.exports.placement import PlacementRequest, Purpose

        nodes = case.get("nodes", [])
        request = PlacementRequest(
            volume=v,
            purpose=wit_enum(Purpose, case.get("purpose", "create"), "purpose"),
            accessible_topology=[pairs(t) for t in case.get("accessible_topology", [])],
            settings=settings,
        )
        verdicts = app.Placement().place(request, candidates(nodes))
        return decision, check_placement(e, [n["name"] for n in nodes], verdicts)
    if decision == "admission":
        request = admission_request(case.get("admission"), v, settings)
        return decision, check_admission(e, app.Admission().admit(request))
    from wit_world.exports.retry import Failure
    from wit_world.imports.types import Code, Operation

    f = case.get("failure")
    if f is None:
        raise CaseError("a retry case needs `failure = { operation = ..., code = ... }`")
    code = f["code"]
    code = GRPC_CODES[int(code) - 1] if str(code).isdigit() and 0 < int(code) <= 16 else str(code)
    failure = Failure(
        operation=wit_enum(Operation, f["operation"], "operation"),
        code=wit_enum(Code, code, "code"),
        message=f.get("message", "from the plugin"),
        attempt=f.get("attempt", 1),
        elapsed_ms=f.get("elapsed_ms", 0),
        driver=f.get("driver", "hostpath.csi.berth.dev"),
        settings=settings,
    )
    return decision, check_retry(e, failure.attempt, app.Retry().classify(failure))


def run(app_dir: str, case_file: str) -> int:
    sys.path.insert(0, app_dir)
    app = importlib.import_module("app")
    with open(case_file, "rb") as f:
        cases = tomllib.load(f)
    if not cases.get("case"):
        print(f"{case_file}: the file has no [[case]] entries", file=sys.stderr)
        return 2
    failed = 0
    for case in cases["case"]:
        settings = dict(cases.get("settings", {}))
        settings.update(case.get("settings", {}))
        started = time.perf_counter()
        try:
            decision, detail = run_case(app, pairs(settings), case)
            mark = "PASS"
        except CaseError as e:
            decision, detail, mark = case.get("decision", "?"), str(e), "FAIL"
            failed += 1
        micros = int((time.perf_counter() - started) * 1e6)
        print(f"{mark}  {case.get('name', '?')} ({decision}): {detail} ({micros} µs)")
    print(f"{len(cases['case']) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    sys.exit(run(sys.argv[1], sys.argv[2]))
