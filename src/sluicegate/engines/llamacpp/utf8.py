"""Token pieces to text: UTF-8 decoded as it streams, a character split over tokens held back."""

from __future__ import annotations

import codecs


class PieceDecoder:
    """What `codecs.getincrementaldecoder("utf-8")("replace")` returns, in the same steps (its
    `BufferedIncrementalDecoder.decode`), as a class mypyc compiles: per token on the worker,
    that decoder's `decode` is a Python method between two decodes."""

    __slots__ = ("_undecoded",)

    def __init__(self) -> None:
        self._undecoded = b""  # a character's first bytes, its last still to come

    def decode(self, piece: bytes, final: bool = False) -> str:
        data = self._undecoded + piece if self._undecoded else piece
        text, used = codecs.utf_8_decode(data, "replace", final)
        self._undecoded = data[used:]
        return text
