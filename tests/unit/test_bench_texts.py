"""`bench/speculative.py`'s edit, predict and rename workloads show source files of this
repository as they were on 2026-11-29 (bench/texts/), not as src/ holds them now: read from
src/, every change to those files moved the prompts, and so the figures of each later round."""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
# The frozen texts' SHA-256: the files of main at e03f5b1. Another text is another workload,
# whose figures do not compare with the rounds before it.
FROZEN = {
    "edit_stops.py.txt": "42408ff2793765af0e5cd890589a3dcd8092df372f8e6dc8fa695985b7db2d5a",
    "predict_engine.py.txt": "52882312be554a31503fbc71a9390086fb770ce161f6eb590668a0dc1bff0a96",
    "rename_speculative.py.txt": "d2a315562205b959f389589602aa35715de36a030e195614d6a7d0b7f79e677d",
}


@pytest.fixture
def speculative(monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    monkeypatch.syspath_prepend(str(BENCH))  # the scripts import each other by module name
    import speculative

    yield speculative
    for name in ("speculative", "speculation_replay", "batching", "local_engine"):
        sys.modules.pop(name, None)


@pytest.mark.parametrize("name", sorted(FROZEN))
def test_the_frozen_texts_are_the_bytes_the_rounds_used(name: str) -> None:
    assert hashlib.sha256((BENCH / "texts" / name).read_bytes()).hexdigest() == FROZEN[name]


def test_the_workloads_read_the_frozen_texts(speculative: ModuleType) -> None:
    texts = BENCH / "texts"
    assert {speculative.EDITED, speculative.PREDICTED, speculative.RENAMED} == {texts / n for n in FROZEN}

    predict = (texts / "predict_engine.py.txt").read_text().splitlines(keepends=True)
    messages, prediction = speculative.predict_messages(300)
    assert prediction == "".join(predict[2:300])
    assert "".join(predict[:300]) in messages[0]["content"]

    rename = (texts / "rename_speculative.py.txt").read_text().splitlines(keepends=True)
    messages, prediction = speculative.rename_messages(107, 300, 8)
    assert prediction == "".join(rename[115:407])
    assert messages[1]["content"].endswith("".join(rename[107:115]).replace("slot", "lane"))

    edit = (texts / "edit_stops.py.txt").read_text().splitlines()
    assert speculative.edit_prompt(32).startswith("# stops.py\n" + "\n".join(edit[:32]) + "\n\n")
