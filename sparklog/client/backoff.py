"""The one backoff rule of the clients' retry loops: exponential with jitter, as Kafka's `ExponentialBackoff`
(KIP-580 for `retry.backoff.ms` / `retry.backoff.max.ms`, KIP-144 for `reconnect.backoff.ms` /
`reconnect.backoff.max.ms`).

    delay(attempts) = min(max, initial * MULTIPLIER ** attempts * uniform(1 - JITTER, 1 + JITTER))

Rule 1: `attempts` counts the failures in a row before this wait, from 0: the first retry waits about
`initial`, and a success resets the count (the caller keeps it, or uses `Retry`).
Rule 2: the delay never exceeds `max` (jitter included) and never goes below zero; with `initial >= max`
the delay is `max` every time, which is Kafka's way to ask for a fixed backoff.
Rule 3: `Retry.sleep()` never sleeps past its deadline: a retry loop ends within its timeout.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass

MULTIPLIER = 2  # Kafka's CommonClientConfigs.RETRY_BACKOFF_EXP_BASE
JITTER = 0.2  # Kafka's CommonClientConfigs.RETRY_BACKOFF_JITTER: +-20%
_MAX_EXPONENT = 62  # beyond this the doubling only overflows: max has long been reached
_random = random.Random()  # our own generator: jitter never disturbs (or depends on) the global one


@dataclass(frozen=True)
class ExponentialBackoff:
    """Delays in seconds from settings in milliseconds (Kafka's names: `retry.backoff.ms`, `...max.ms`)."""

    initial_ms: float
    max_ms: float

    def delay(self, attempts: int, uniform=_random.uniform) -> float:
        if self.initial_ms >= self.max_ms:
            return max(0.0, self.max_ms) / 1000.0  # Rule 2: fixed backoff
        term = self.initial_ms * MULTIPLIER ** min(max(0, attempts), _MAX_EXPONENT)
        return max(0.0, min(self.max_ms, term * uniform(1 - JITTER, 1 + JITTER))) / 1000.0

    @classmethod
    def retry(cls, config: dict) -> "ExponentialBackoff":
        return cls(config["retry.backoff.ms"], config["retry.backoff.max.ms"])

    @classmethod
    def reconnect(cls, config: dict) -> "ExponentialBackoff":
        return cls(config["reconnect.backoff.ms"], config["reconnect.backoff.max.ms"])


class Retry:
    """A blocking retry loop's clock: `while not done: ...; retry.sleep()` (raises nothing itself).

    `expired()` tells the caller to give up; `sleep()` waits the next backoff, cut at the deadline (Rule 3).
    """

    def __init__(self, backoff: ExponentialBackoff, timeout: float, clock=time.monotonic, sleep=time.sleep) -> None:
        self.backoff = backoff
        self.deadline = clock() + timeout
        self.attempts = 0
        self._clock = clock
        self._sleep = sleep

    def remaining(self) -> float:
        return max(0.0, self.deadline - self._clock())

    def expired(self) -> bool:
        return self._clock() >= self.deadline

    def sleep(self) -> None:
        self._sleep(min(self.backoff.delay(self.attempts), self.remaining()))
        self.attempts += 1
