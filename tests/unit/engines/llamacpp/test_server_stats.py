"""engines/llamacpp/server_stats.py: llama-server's `llamacpp:*` families, in its text format."""

from __future__ import annotations

import weakref

from sluicegate.engines.llamacpp.server_stats import ServerStats


def parse(text: str) -> tuple[dict[str, str], dict[str, float]]:
    types, values = {}, {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            types[name] = kind
        elif line.startswith("llamacpp:"):
            name, value = line.split(" ", 1)
            values[name] = float(value)
    return types, values


class Queues:
    def counts(self) -> tuple[int, int]:
        return 2, 3


def test_counters_keep_their_total_suffix_and_sum_requests() -> None:
    stats = ServerStats()
    stats.finished(prompt=10, cached=4, predicted=5, prompt_seconds=0.5, predicted_seconds=2.0)
    stats.finished(prompt=3, cached=0, predicted=1, prompt_seconds=0.25, predicted_seconds=0.0)
    stats.decoded(2)
    stats.decoded(1)
    stats.drafted(4, 3)
    types, values = parse(stats.exposition().decode())
    # prometheus-client would write `# TYPE llamacpp:prompt_tokens counter`: scrapers of
    # llama-server look the family up by its whole name.
    assert types["llamacpp:prompt_tokens_total"] == "counter"
    assert types["llamacpp:requests_processing"] == "gauge"
    assert values["llamacpp:prompt_tokens_total"] == 9  # cached tokens apart
    assert values["llamacpp:prompt_tokens_cached_total"] == 4
    assert values["llamacpp:tokens_predicted_total"] == 6
    assert values["llamacpp:prompt_seconds_total"] == 0.75
    assert values["llamacpp:n_decode_total"] == 2
    assert values["llamacpp:n_busy_slots_per_decode"] == 1.5
    assert values["llamacpp:n_tokens_max"] == 15
    assert values["llamacpp:spec_decode_num_draft_tokens_total"] == 4
    assert values["llamacpp:spec_decode_num_accepted_tokens_total"] == 3
    assert values["llamacpp:spec_decode_num_drafts_total"] == 1


def test_throughput_gauges_cover_the_window_since_the_last_scrape() -> None:
    stats = ServerStats()
    stats.finished(prompt=8, cached=0, predicted=4, prompt_seconds=2.0, predicted_seconds=1.0)
    _, first = parse(stats.exposition().decode())
    assert first["llamacpp:prompt_tokens_seconds"] == 4.0
    assert first["llamacpp:predicted_tokens_seconds"] == 4.0
    _, second = parse(stats.exposition().decode())
    assert second["llamacpp:prompt_tokens_seconds"] == 0.0  # nothing since
    assert second["llamacpp:prompt_tokens_total"] == 8  # the counters stay


def test_embeddings_count_as_prompt_and_decodes_with_no_output() -> None:
    stats = ServerStats()
    stats.pooled(tokens=6, decodes=2, seconds=0.1)
    _, values = parse(stats.exposition().decode())
    assert values["llamacpp:prompt_tokens_total"] == 6 and values["llamacpp:n_decode_total"] == 2
    assert values["llamacpp:tokens_predicted_total"] == 0


def test_running_and_waiting_come_from_each_live_scheduler() -> None:
    stats = ServerStats()
    queues = Queues()
    stats.attach(1, weakref.WeakMethod(queues.counts))
    _, values = parse(stats.exposition().decode())
    assert (values["llamacpp:requests_processing"], values["llamacpp:requests_deferred"]) == (2, 3)
    stats.detach(1)
    _, values = parse(stats.exposition().decode())
    assert (values["llamacpp:requests_processing"], values["llamacpp:requests_deferred"]) == (0, 0)
