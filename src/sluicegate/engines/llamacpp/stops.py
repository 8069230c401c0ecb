"""Stop strings over streamed text: never emit a stop string, nor a piece that may become one."""

from __future__ import annotations


class StopScanner:
    def __init__(self, stops: list[str]) -> None:
        self._stops = [s for s in stops if s]
        self._held = ""
        self.reached: str | None = None  # the stop string found, once one was

    def feed(self, text: str) -> tuple[str, bool]:
        """(text safe to emit now, whether a stop string was reached)."""
        if not self._stops:
            return text, False
        held = self._held + text
        found = [(at, stop) for stop in self._stops if (at := held.find(stop)) >= 0]
        if found:
            cut, self.reached = min(found, key=lambda hit: hit[0])
            self._held = ""
            return held[:cut], True
        keep = 0  # the longest tail that is the start of some stop string
        for stop in self._stops:
            for size in range(min(len(stop) - 1, len(held)), keep, -1):
                if held.endswith(stop[:size]):
                    keep = size
                    break
        self._held = held[len(held) - keep :] if keep else ""
        return held[: len(held) - keep], False

    def flush(self) -> str:
        """What was held back, at the end of generation (no stop string came)."""
        held, self._held = self._held, ""
        return held
