"""llama.cpp's further samplers read by every dialect's sampling fields (`sampling_fields`):
llama-server's names and limits, Ollama's options sharing the mirostat ones."""

from __future__ import annotations

import pytest

from sluicegate.core.errors import SluicegateError
from sluicegate.core.validation import Fields, sampling_fields


def test_the_names_llama_server_takes() -> None:
    s = sampling_fields(
        Fields(
            {
                "dry_multiplier": 0.8,
                "dry_base": 1.5,
                "dry_allowed_length": 3,
                "dry_penalty_last_n": -1,
                "dry_sequence_breakers": ["\n", "###"],
                "xtc_probability": 0.5,
                "xtc_threshold": 0.2,
                "top_n_sigma": 1.0,
                "mirostat": 2,
                "mirostat_tau": 4.0,
                "mirostat_eta": 0.2,
            }
        )
    )
    assert (s.dry_multiplier, s.dry_base, s.dry_allowed_length, s.dry_penalty_last_n) == (0.8, 1.5, 3, -1)
    assert s.dry_sequence_breakers == ["\n", "###"]
    assert (s.xtc_probability, s.xtc_threshold, s.top_n_sigma) == (0.5, 0.2, 1.0)
    assert (s.mirostat, s.mirostat_tau, s.mirostat_eta) == (2, 4.0, 0.2)
    assert sampling_fields(Fields({})).mirostat == 0


@pytest.mark.parametrize(
    "body",
    [
        {"mirostat": 3},
        {"dry_sequence_breakers": []},
        {"dry_sequence_breakers": "\n"},
        {"dry_sequence_breakers": ["\n", 1]},
        {"xtc_probability": 1.5},
        {"dry_multiplier": -1},
    ],
)
def test_out_of_range_is_a_400_naming_the_parameter(body: dict[str, object]) -> None:
    with pytest.raises(SluicegateError) as raised:
        sampling_fields(Fields(body))
    assert raised.value.info.param == next(iter(body))


def test_ignore_eos_is_read_by_chat_completions_and_sent_upstream() -> None:
    """llama-server takes `ignore_eos` on its Chat Completions as on `/completion`: a client
    (or a bench) that sends it there gets replies to the limit, and an upstream hears it."""
    from sluicegate.dialects.chat_completions.request import parse_chat_request
    from sluicegate.engines.upstream.request_body import add_sampling

    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "ignore_eos": True}
    request, _ = parse_chat_request(body)
    assert request.sampling.ignore_eos
    sent: dict[str, object] = {}
    add_sampling(sent, request.sampling)
    assert sent["ignore_eos"] is True
    plain: dict[str, object] = {}
    add_sampling(plain, sampling_fields(Fields({})))
    assert "ignore_eos" not in plain
