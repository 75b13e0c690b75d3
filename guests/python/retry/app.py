"""Sample retry policy in Python: the same as the Rust sample (guests/retry),
passing the same case file.

NOT_FOUND while undoing is done; transient codes back off exponentially
(with jitter); RESOURCE_EXHAUSTED waits longer; INTERNAL and UNKNOWN are
retried a few times; anything else needs an operator. Settings: ``base-ms``,
``max-ms``, ``exhausted-base-ms``, ``max-attempts``, ``max-internal-attempts``.
"""

from berth_policy import backoff_ms, code_name, is_undo, number_setting, operation_name, stable_hash
from wit_world import exports
from wit_world.exports.retry import Decision_Done, Decision_GiveUp, Decision_RetryAfter, Failure
from wit_world.imports.types import Code

TRANSIENT = {Code.CANCELLED, Code.DEADLINE_EXCEEDED, Code.UNAVAILABLE, Code.ABORTED}


def jitter(ms: int, percent: int, seed: str) -> int:
    """``ms`` moved by up to ``percent`` percent either way. A decision runs in
    a fresh instance with no source of randomness, so the spread comes from
    the failure itself: different failures spread, one failure is stable."""
    spread = ms * min(percent, 100) // 100
    if spread == 0:
        return ms
    return ms - spread + stable_hash(seed) % (2 * spread + 1)


class Retry(exports.Retry):
    def classify(self, f: Failure):
        s = f.settings
        try:
            base = number_setting(s, "base-ms", 500)
            maximum = number_setting(s, "max-ms", 60_000)
            exhausted_base = number_setting(s, "exhausted-base-ms", 5_000)
            max_attempts = number_setting(s, "max-attempts", 8)
            max_internal = number_setting(s, "max-internal-attempts", 3)
        except ValueError as e:
            return Decision_GiveUp(f"bad setting: {e}")
        what = f"{operation_name(f.operation)} {code_name(f.code)}: {f.message}"
        if f.code == Code.NOT_FOUND and is_undo(f.operation):
            return Decision_Done()
        if f.attempt >= max_attempts:
            return Decision_GiveUp(f"gave up after {f.attempt} attempts: {what}")
        if f.code in TRANSIENT:
            delay = backoff_ms(f.attempt, base, maximum)
        elif f.code == Code.RESOURCE_EXHAUSTED:
            delay = backoff_ms(f.attempt, exhausted_base, max(maximum, exhausted_base))
        elif f.code in (Code.INTERNAL, Code.UNKNOWN):
            if f.attempt >= max_internal:
                return Decision_GiveUp(f"plugin error persisted for {f.attempt} attempts: {what}")
            delay = backoff_ms(f.attempt, base, maximum)
        else:
            return Decision_GiveUp(f"needs an operator: {what}")
        seed = f"{f.driver}/{what}/{f.attempt}/{f.elapsed_ms}"
        return Decision_RetryAfter(jitter(delay, 10, seed))
