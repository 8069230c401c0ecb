"""The worker's piece decoder against the codecs incremental decoder it stands for."""

from __future__ import annotations

import codecs
import random

from sluicegate.engines.llamacpp.utf8 import PieceDecoder

TEXT = "plain ASCII, café, naïve, 東京, emoji 🙂🌊, and ∑ of ∞".encode()


def _both(pieces: list[bytes]) -> tuple[list[str], list[str]]:
    ours, theirs = PieceDecoder(), codecs.getincrementaldecoder("utf-8")("replace")
    got = [ours.decode(p) for p in pieces] + [ours.decode(b"", final=True)]
    want = [theirs.decode(p) for p in pieces] + [theirs.decode(b"", final=True)]
    return got, want


def test_characters_split_over_pieces_come_out_whole_and_in_the_same_steps() -> None:
    rng = random.Random(7)
    for _ in range(300):
        cuts = sorted(rng.sample(range(1, len(TEXT)), rng.randint(1, 20)))
        pieces = [TEXT[a:b] for a, b in zip([0, *cuts], [*cuts, len(TEXT)], strict=True)]
        got, want = _both(pieces)
        assert got == want
        assert "".join(got) == TEXT.decode()


def test_invalid_and_truncated_bytes_are_replaced_as_codecs_does() -> None:
    cases = [
        [b"\xff", b"a"],  # never valid
        [b"\xe6\x9d", b"x"],  # a character cut short by another
        [b"ok \xf0\x9f"],  # cut short at the end: replaced only when final
        [b"\xc3", b"", b"\xa9"],  # an empty piece (a control token) in between
        [b"\xed\xa0\x80"],  # a surrogate's encoding
    ]
    for pieces in cases:
        got, want = _both(pieces)
        assert got == want
