"""Tiny in-process counters and gauges, exposed at GET /metrics in Prometheus text format.

Kept deliberately small: a dict increment per event is all the hot path pays.
"""

from __future__ import annotations

from collections import defaultdict

Labels = tuple[tuple[str, str], ...]


class Metrics:
    def __init__(self) -> None:
        self.counters: defaultdict[tuple[str, Labels], float] = defaultdict(float)
        self.gauges: defaultdict[tuple[str, Labels], float] = defaultdict(float)

    @staticmethod
    def key(name: str, **labels: str) -> tuple[str, Labels]:
        """A precomputed counter key, for hot paths that increment `counters[key]` directly."""
        return (name, tuple(sorted(labels.items())))

    def inc(self, name: str, value: float = 1.0, **labels: str) -> None:
        self.counters[(name, tuple(sorted(labels.items())))] += value

    def add_gauge(self, name: str, value: float, **labels: str) -> None:
        self.gauges[(name, tuple(sorted(labels.items())))] += value

    def render(self) -> str:
        lines: list[str] = []
        for kind, table in (("counter", self.counters), ("gauge", self.gauges)):
            seen: set[str] = set()
            for (name, labels), value in sorted(table.items()):
                if name not in seen:
                    lines.append(f"# TYPE {name} {kind}")
                    seen.add(name)
                label_text = ",".join(f'{k}="{v}"' for k, v in labels)
                lines.append(f"{name}{{{label_text}}} {value:g}" if labels else f"{name} {value:g}")
        return "\n".join(lines) + "\n"


METRICS = Metrics()
