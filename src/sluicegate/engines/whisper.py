"""Speech to text with Whisper on faster-whisper (CTranslate2): `engine = "whisper"` (issue 45).

faster-whisper is what the field runs Whisper with on a CPU (int8 CTranslate2 kernels, the
decoder Whisper's own reference uses); docs/speech-to-text.md says why. Its `transcribe` is lazy:
it hears 30-second windows one at a time, so each step runs in a worker thread and a client that
leaves stops the work after the window in hand; the engine is not used again until that step has
returned (one model, one decoder at a time).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any, ClassVar

from sluicegate.core.errors import invalid
from sluicegate.core.speech import Segment, Transcribed, TranscriptEvent, TranscriptionRequest, Word
from sluicegate.engines.base import ConfigError, ProgressCallback, Task
from sluicegate.engines.speech_engine import SpeechEngine
from sluicegate.engines.speech_files import check_keys, model_dir, weights_source

KEYS = frozenset(
    {"id", "engine", "path", "packages", "compute_type", "threads", "beam_size", "language", "vad_filter"}
)
TRANSCRIPTION: frozenset[Task] = frozenset({"transcription"})
_FALLBACK = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)  # Whisper's temperatures when a window fails its checks


class WhisperEngine(SpeechEngine):
    kind: ClassVar[str] = "whisper"
    speech_tasks: ClassVar[frozenset[Task]] = TRANSCRIPTION
    description: ClassVar[str] = "a speech-to-text model"
    route: ClassVar[str] = "POST /v1/audio/transcriptions"
    details: ClassVar[dict[str, str]] = {"type": "stt", "format": "ctranslate2", "architecture": "whisper"}

    def __init__(
        self,
        model_id: str,
        *,
        path: Path | None,
        packages: list[str],
        compute_type: str = "int8",
        threads: int = 0,
        beam_size: int = 5,
        language: str | None = None,
        vad_filter: bool = False,
    ) -> None:
        super().__init__(model_id)
        self.path = path
        self.packages = packages
        self.compute_type = compute_type
        self.threads = threads
        self.beam_size = beam_size
        self.language = language
        self.vad_filter = vad_filter
        self._model: Any = None

    @classmethod
    def from_config(cls, table: dict[str, Any], base_dir: Path) -> WhisperEngine:
        check_keys(table, KEYS)
        path, packages = weights_source(table, base_dir)
        for key, kind in (("threads", int), ("beam_size", int), ("compute_type", str), ("language", str)):
            if key in table and (not isinstance(table[key], kind) or isinstance(table[key], bool)):
                raise ConfigError(f"model {table['id']!r}: `{key}` must be {kind.__name__}")
        return cls(
            table["id"],
            path=path,
            packages=packages,
            compute_type=table.get("compute_type", "int8"),
            threads=table.get("threads", 0),
            beam_size=max(1, table.get("beam_size", 5)),
            language=table.get("language"),
            vad_filter=bool(table.get("vad_filter", False)),
        )

    async def load(self, on_progress: ProgressCallback) -> None:
        def load() -> Any:
            from faster_whisper import WhisperModel

            folder = self.path if self.path is not None else model_dir(self.packages)
            return WhisperModel(
                str(folder), device="cpu", compute_type=self.compute_type, cpu_threads=self.threads
            )

        self._model = await asyncio.to_thread(load)
        on_progress(1.0)

    async def unload(self) -> None:
        self._model = None

    async def aclose(self) -> None:
        self._model = None

    async def transcribe(self, request: TranscriptionRequest) -> AsyncIterator[TranscriptEvent]:
        model = self._model
        if model is None:
            raise invalid(f"Model {self.model_id!r} is not loaded.", param="model")
        import numpy as np

        samples = np.frombuffer(request.samples, dtype="<f4")
        language = request.language or self.language

        def start() -> tuple[Iterator[Any], Any]:
            segments, info = model.transcribe(
                samples,
                language=language,
                task=request.task,
                initial_prompt=request.prompt,
                temperature=(request.temperature,) if request.temperature > 0 else _FALLBACK,
                beam_size=self.beam_size,
                word_timestamps=request.words,
                vad_filter=self.vad_filter,
            )
            return iter(segments), info

        pending: asyncio.Future[Any] | None = None
        try:
            pending = asyncio.ensure_future(asyncio.to_thread(start))
            segments, info = await asyncio.shield(pending)
            number = 0
            while True:
                pending = asyncio.ensure_future(asyncio.to_thread(next, segments, None))
                found = await asyncio.shield(pending)
                if found is None:
                    break
                yield _segment(number, found)
                number += 1
            pending = None
            yield Transcribed(info.language, float(info.duration))
        finally:
            if pending is not None and not pending.done():
                # The client left mid-window: the model is not free until the thread returns.
                with contextlib.suppress(BaseException):
                    await asyncio.wait([pending])


def _segment(number: int, s: Any) -> Segment:
    return Segment(
        id=number,
        seek=int(s.seek),
        start=float(s.start),
        end=float(s.end),
        text=s.text,
        tokens=list(s.tokens),
        temperature=float(s.temperature or 0.0),
        avg_logprob=float(s.avg_logprob),
        compression_ratio=float(s.compression_ratio),
        no_speech_prob=float(s.no_speech_prob),
        words=[Word(w.word, float(w.start), float(w.end), float(w.probability)) for w in s.words or ()],
    )
