from berth_policy import backoff_ms, code_name, is_undo, number_setting, operation_name
from wit_world.exports.retry import Decision_Done, Decision_GiveUp, Decision_RetryAfter, Failure
from wit_world.imports.types import Code

TRANSIENT = {Code.UNAVAILABLE, Code.DEADLINE_EXCEEDED, Code.ABORTED, Code.RESOURCE_EXHAUSTED}


class Retry(exports.Retry):
    """Transient failures back off exponentially from ``base-ms`` (500), up
    to ``max-attempts`` (8); NOT_FOUND while undoing means done; anything
    else needs an operator."""

    def classify(self, f: Failure):
        try:
            base = number_setting(f.settings, "base-ms", 500)
            max_attempts = number_setting(f.settings, "max-attempts", 8)
        except ValueError as e:
            return Decision_GiveUp(f"bad setting: {e}")
        what = f"{operation_name(f.operation)} {code_name(f.code)}: {f.message}"
        if f.code == Code.NOT_FOUND and is_undo(f.operation):
            return Decision_Done()
        if f.attempt >= max_attempts:
            return Decision_GiveUp(f"gave up after {f.attempt} attempts: {what}")
        if f.code in TRANSIENT:
            return Decision_RetryAfter(backoff_ms(f.attempt, base, 60_000))
        return Decision_GiveUp(f"needs an operator: {what}")
