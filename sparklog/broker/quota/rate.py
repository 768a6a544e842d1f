"""A rate over `samples` windows of `window_s` seconds, as Kafka's sampled `Rate` measures it.

Rule: sampled-rate. `record(value, now)` adds to the newest window (a new one starts once the newest is
`window_s` old; windows older than `samples * window_s` are dropped). `rate(now)` is the sum of the windows
kept over the time they span, from the start of the oldest to `now`, but never less than `samples - 1` whole
windows (so a first burst is measured over the full span, not over the few milliseconds it took).
Rule: throttle-time. Over a bound B, a measured rate R needs `(R - B) / B * span` of silence to fall back to B
(Kafka's QuotaUtils.throttleTime): that delay, in milliseconds, is what `throttle_ms` gives; 0 within the
bound, and never more than the whole span kept (`samples * window_s`, Kafka's maxThrottleTimeMs), so one huge
request against a tiny bound mutes its connection for seconds, not days. A sensor with no window left in the span measures 0, so dropping an idle sensor changes nothing
(`idle`).
"""

from __future__ import annotations


class Rate:
    __slots__ = ("window_s", "samples", "starts", "values", "last")

    def __init__(self, window_s: float, samples: int) -> None:
        self.window_s = window_s
        self.samples = samples
        self.starts: list[float] = []
        self.values: list[float] = []
        self.last = 0.0  # when something was last recorded

    def record(self, value: float, now: float) -> None:
        starts = self.starts
        if not starts or now - starts[-1] >= self.window_s:
            starts.append(now)
            self.values.append(value)
            if len(starts) > self.samples:
                del starts[0], self.values[0]
        else:
            self.values[-1] += value
        self.last = now

    def _purge(self, now: float) -> None:
        horizon = now - self.samples * self.window_s
        starts = self.starts
        while starts and starts[0] + self.window_s <= horizon:
            del starts[0], self.values[0]

    def span(self, now: float) -> float:
        """The time the rate is measured over (Rule: sampled-rate)."""
        elapsed = now - self.starts[0] if self.starts else 0.0
        return max(elapsed, (self.samples - 1) * self.window_s, self.window_s)

    def rate(self, now: float) -> float:
        self._purge(now)
        if not self.values:
            return 0.0
        return sum(self.values) / self.span(now)

    def throttle_ms(self, bound: float, now: float) -> int:
        """Rule: throttle-time."""
        measured = self.rate(now)
        if measured <= bound:
            return 0
        delay = (measured - bound) / bound * self.span(now)
        return int(min(delay, self.samples * self.window_s) * 1000.0)

    def idle(self, now: float) -> bool:
        return now - self.last > self.samples * self.window_s
