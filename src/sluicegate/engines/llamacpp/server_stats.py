"""llama-server's own metrics (`llamacpp:*` on /metrics) for the local llama.cpp engines.

Dashboards and scrapers written for llama-server read these names (its
`server_task_result_metrics::to_metrics`), so a local model shows up in them unchanged. The
counts are the engines' own, the same ones a `/completion` answer's `timings` are made of:
prompt tokens decoded (cached ones apart), tokens generated, the seconds of each, and every
`llama_decode` call. llama-server serves one model, so the counts are summed over every local
llama.cpp model of this process (a server with `workers > 1` shows each scrape one process's).

The gauges are llama-server's: throughputs averaged over the window since the previous scrape
(each scrape starts a new window), the requests running and waiting, and busy slots per decode.
The exposition is written here, not through prometheus-client, which would drop the `_total`
from a counter's `# TYPE` line that llama-server's clients look up by its full name.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, fields

from sluicegate.observe.metrics import METRICS


@dataclass(slots=True)
class _Counts:
    prompt_tokens: int = 0  # decoded, cached ones excluded
    prompt_cached: int = 0
    prompt_seconds: float = 0.0
    predicted: int = 0
    predicted_seconds: float = 0.0
    decodes: int = 0  # llama_decode calls (not a draft model's)
    busy_slots: int = 0  # summed over the decodes: the sequences in each
    tokens_max: int = 0  # the longest sequence seen, prompt and output
    draft_tokens: int = 0
    draft_accepted: int = 0
    drafts: int = 0  # verification steps
    # The window since the last scrape, for the throughput gauges.
    window_prompt: int = 0
    window_prompt_seconds: float = 0.0
    window_predicted: int = 0
    window_predicted_seconds: float = 0.0


class ServerStats:
    """The process's counts. Written by the engines' worker threads (one lock: several models
    decode on threads of their own), read by a scrape."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.counts = _Counts()
        self.started = int(time.time())  # llama-server's `Process-Start-Time-Unix`
        # Requests running and waiting, read at scrape time from each live scheduler.
        self._queues: dict[int, weakref.WeakMethod[Callable[[], tuple[int, int]]]] = {}
        self._registered = False

    def attach(self, key: int, queues: weakref.WeakMethod[Callable[[], tuple[int, int]]]) -> None:
        """A scheduler starts: its (running, waiting) counts join the gauges, and /metrics
        shows the `llamacpp:*` families from now on."""
        with self._lock:
            self._queues[key] = queues
            self._register()

    def _register(self) -> None:  # (under the lock)
        if not self._registered:
            self._registered = True
            METRICS.add_text(self.exposition)

    def detach(self, key: int) -> None:
        with self._lock:
            self._queues.pop(key, None)

    def decoded(self, sequences: int) -> None:
        with self._lock:
            self.counts.decodes += 1
            self.counts.busy_slots += sequences

    def drafted(self, drafted: int, accepted: int) -> None:
        with self._lock:
            c = self.counts
            c.drafts += 1
            c.draft_tokens += drafted
            c.draft_accepted += accepted

    def finished(
        self, prompt: int, cached: int, predicted: int, prompt_seconds: float, predicted_seconds: float
    ) -> None:
        """One request's generation ended: `prompt` tokens in all, `cached` of them reused."""
        with self._lock:
            c = self.counts
            c.prompt_tokens += prompt - cached
            c.prompt_cached += cached
            c.prompt_seconds += prompt_seconds
            c.predicted += predicted
            c.predicted_seconds += predicted_seconds
            c.tokens_max = max(c.tokens_max, prompt + predicted)
            c.window_prompt += prompt - cached
            c.window_prompt_seconds += prompt_seconds
            c.window_predicted += predicted
            c.window_predicted_seconds += predicted_seconds

    def pooled(self, tokens: int, decodes: int, seconds: float) -> None:
        """Embedding or rerank inputs decoded: prompt tokens, and decodes, with no output."""
        with self._lock:
            self._register()
            c = self.counts
            c.prompt_tokens += tokens
            c.prompt_seconds += seconds
            c.decodes += decodes
            c.busy_slots += decodes
            c.tokens_max = max(c.tokens_max, tokens)
            c.window_prompt += tokens
            c.window_prompt_seconds += seconds

    def exposition(self) -> bytes:
        """The `llamacpp:*` families in Prometheus's text format; starts a new gauge window."""
        with self._lock:
            c = self.counts
            snapshot = _Counts(*(getattr(c, f.name) for f in fields(_Counts)))
            c.window_prompt = c.window_predicted = 0
            c.window_prompt_seconds = c.window_predicted_seconds = 0.0
            queues = list(self._queues.values())
        running = waiting = 0
        for ref in queues:
            counts = ref()
            if counts is not None:  # (a scheduler dropped without its loop having run)
                r, w = counts()
                running += r
                waiting += w
        return render(snapshot, running, waiting)


def _rate(n: int, seconds: float) -> float:
    return n / seconds if seconds > 0 else 0.0


def render(c: _Counts, running: int, waiting: int) -> bytes:
    counters = (
        (
            "prompt_tokens_total",
            "Number of prompt tokens processed, excluding cached tokens",
            c.prompt_tokens,
        ),
        ("prompt_tokens_cached_total", "Number of prompt tokens reused from the cache", c.prompt_cached),
        ("prompt_seconds_total", "Total time spent processing prompts", c.prompt_seconds),
        ("tokens_predicted_total", "Number of generation tokens processed", c.predicted),
        ("tokens_predicted_seconds_total", "Total time spent generating tokens", c.predicted_seconds),
        ("n_decode_total", "Total number of llama_decode() calls, excluding speculative decoding", c.decodes),
        ("n_tokens_max", "Largest observed sequence length (prompt + generation)", c.tokens_max),
        ("spec_decode_num_draft_tokens_total", "Speculative: Total draft tokens generated", c.draft_tokens),
        (
            "spec_decode_num_accepted_tokens_total",
            "Speculative: Total draft tokens accepted by the target model",
            c.draft_accepted,
        ),
        (
            "spec_decode_num_drafts_total",
            "Speculative: Total speculative decoding verification steps",
            c.drafts,
        ),
    )
    gauges = (
        (
            "prompt_tokens_seconds",
            "Average prompt throughput in tokens/s",
            _rate(c.window_prompt, c.window_prompt_seconds),
        ),
        (
            "predicted_tokens_seconds",
            "Average generation throughput in tokens/s",
            _rate(c.window_predicted, c.window_predicted_seconds),
        ),
        ("requests_processing", "Number of requests processing", running),
        ("requests_deferred", "Number of requests deferred", waiting),
        (
            "n_busy_slots_per_decode",
            "Average number of busy slots per llama_decode() call",
            c.busy_slots / max(c.decodes, 1),
        ),
    )
    lines = []
    for kind, items in (("counter", counters), ("gauge", gauges)):
        for name, help_text, value in items:
            lines.append(
                f"# HELP llamacpp:{name} {help_text}\n# TYPE llamacpp:{name} {kind}\nllamacpp:{name} {value}\n"
            )
    return "".join(lines).encode()


STATS = ServerStats()
