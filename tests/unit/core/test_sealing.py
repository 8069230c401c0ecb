"""Sealed blobs (core/sealing.py) and the Responses items that carry them (responses_sealed)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from sluicegate.core.errors import SluicegateError
from sluicegate.core.sealing import Sealer, load_key, scope_of
from sluicegate.dialects.responses.compact import parse_compact_request
from sluicegate.dialects.responses.sealed import SUMMARY_PREFIX, compaction_item, expand_sealed

SCOPE = scope_of("key-a")


def sealer() -> Sealer:
    return Sealer(b"k" * 32)


def refused(blob: str, *, with_sealer: Sealer | None = None, scope: str = SCOPE, purpose: str = "p") -> str:
    with pytest.raises(SluicegateError) as caught:
        (with_sealer or sealer()).unseal(blob, purpose=purpose, scope=scope, param="input")
    assert caught.value.info.status == 400 and caught.value.info.code == "invalid_encrypted_content"
    return caught.value.info.message


def test_a_blob_opens_for_its_key_scope_and_purpose_only() -> None:
    blob = sealer().seal({"summary": "launch on Tuesday"}, purpose="p", scope=SCOPE)
    assert "Tuesday" not in blob and blob.startswith("sg1.")
    assert sealer().unseal(blob, purpose="p", scope=SCOPE, param="input") == {"summary": "launch on Tuesday"}
    refused(blob, scope=scope_of("key-b"))  # another API key
    refused(blob, purpose="q")  # sealed as something else
    refused(blob, with_sealer=Sealer(b"x" * 32))  # another server
    flipped = blob[:-3] + ("A" if blob[-3] != "A" else "B") + blob[-2:]
    refused(flipped)  # tampered
    for foreign in ("", "sg1.", "sg1.!!!", "gAAAAABpM0Yj-abc=", blob[:20]):
        refused(foreign)


def test_two_seals_of_the_same_payload_differ() -> None:
    s = sealer()
    assert s.seal({"a": 1}, purpose="p", scope=SCOPE) != s.seal({"a": 1}, purpose="p", scope=SCOPE)


def test_the_key_file_is_created_once_and_private(tmp_path: Path) -> None:
    key = load_key(tmp_path / "data")
    assert len(key) == 32 and load_key(tmp_path / "data") == key
    mode = stat.S_IMODE(os.stat(tmp_path / "data" / "sealing.key").st_mode)
    assert mode == 0o600


def test_a_compaction_item_expands_into_the_summary_and_sealed_reasoning_is_restored() -> None:
    s = sealer()
    item = compaction_item("Launch Tuesday.", s, SCOPE)
    sealed_reasoning = s.seal({"text": "I thought hard."}, purpose="reasoning", scope=SCOPE)
    items = [
        {"type": "message", "id": "m1", "role": "user", "content": [{"type": "input_text", "text": "hi"}]},
        item,
        {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": sealed_reasoning},
    ]
    out = expand_sealed(items, s, SCOPE)
    assert out[0] is items[0]
    assert out[1]["type"] == "message" and out[1]["role"] == "user"
    assert out[1]["content"][0]["text"] == SUMMARY_PREFIX + "Launch Tuesday."
    assert out[2]["content"] == [{"type": "reasoning_text", "text": "I thought hard."}]
    assert "encrypted_content" not in out[2]
    with pytest.raises(SluicegateError):
        expand_sealed([item], s, scope_of("key-b"))


def test_a_compact_request_needs_a_model_and_some_input() -> None:
    with pytest.raises(SluicegateError) as caught:
        parse_compact_request({"input": "hi"})
    assert caught.value.info.param == "model"
    with pytest.raises(SluicegateError) as caught:
        parse_compact_request({"model": "m"})
    assert caught.value.info.param == "input"
    compact = parse_compact_request({"model": "m", "previous_response_id": "resp_1", "prompt_cache_key": "k"})
    assert compact.request.input_items == [] and compact.prompt_cache_key == "k"
    assert parse_compact_request({"model": "m", "input": "hi"}).request.input_items[0]["role"] == "user"


def test_sealed_blobs_and_stored_data_share_one_scope_per_key() -> None:
    # One definition (core/scope.py): what the store files a key's data under is what its blobs
    # are sealed to; without keys, everyone shares one scope for both.
    from sluicegate.store.base import request_scope

    keys = ["key-a", "key-b"]
    blob = sealer().seal({"x": 1}, purpose="p", scope=request_scope("key-a", keys))
    assert sealer().unseal(blob, purpose="p", scope=SCOPE, param="input") == {"x": 1}
    refused(blob, scope=request_scope("key-b", keys))
    shared = sealer().seal({"x": 2}, purpose="p", scope=request_scope("unused", []))
    assert sealer().unseal(shared, purpose="p", scope=request_scope("sk-other", []), param="input") == {
        "x": 2
    }
