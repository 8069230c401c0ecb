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
        keep = held_tail(held, self._stops)
        self._held = held[len(held) - keep :] if keep else ""
        return held[: len(held) - keep], False

    def flush(self) -> str:
        """What was held back, at the end of generation (no stop string came)."""
        held, self._held = self._held, ""
        return held


def held_tail(text: str, stops: list[str]) -> int:
    """The length of the longest tail of `text` that is the start of some stop string (and not
    a whole one). Per token on the worker thread: a tail can only start where a stop string's
    first character is, so each stop string costs one `find` when that character is not in
    the last few characters (the usual case), not a test per length."""
    keep, end = 0, len(text)
    for stop in stops:
        at = text.find(stop[0], max(end - len(stop) + 1, 0), end - keep)  # longer tails first
        while at >= 0:
            if stop.startswith(text[at:]):
                keep = end - at
                break
            at = text.find(stop[0], at + 1, end - keep)
    return keep
