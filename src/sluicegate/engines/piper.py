"""Text to speech with Piper voices (ONNX Runtime): `engine = "piper"` (issue 45).

Piper (the piper-tts package) is what local voice assistants speak with on a CPU: a VITS voice
in ONNX, phonemised by espeak-ng, which the package bundles. It synthesises one sentence at a
time; each sentence runs in a worker thread and is yielded as soon as it is done, so the route
streams the first sentence's audio while the next is synthesised, and a client that leaves stops
synthesis after the sentence in hand.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any, ClassVar

from sluicegate.core.errors import invalid
from sluicegate.core.speech import SpeechRequest, Voice, Voiced
from sluicegate.engines.base import ConfigError, ProgressCallback, Task
from sluicegate.engines.speech_engine import SpeechEngine
from sluicegate.engines.speech_files import check_keys, model_dir, package_dir, weights_source

KEYS = frozenset({"id", "engine", "path", "packages", "voice"})
SPEECH: frozenset[Task] = frozenset({"speech"})


def _onnx_file(folder_or_file: Path) -> Path:
    if folder_or_file.is_file():
        return folder_or_file
    found = sorted(folder_or_file.glob("*.onnx"))
    if len(found) != 1:
        raise ConfigError(f"{folder_or_file} holds {len(found)} .onnx voices; name one in `path`")
    return found[0]


class PiperEngine(SpeechEngine):
    kind: ClassVar[str] = "piper"
    speech_tasks: ClassVar[frozenset[Task]] = SPEECH
    description: ClassVar[str] = "a text-to-speech model"
    route: ClassVar[str] = "POST /v1/audio/speech"
    details: ClassVar[dict[str, str]] = {"type": "tts", "format": "onnx", "architecture": "piper"}

    def __init__(self, model_id: str, *, path: Path | None, packages: list[str], voice: str | None) -> None:
        super().__init__(model_id)
        self.path = path
        self.packages = packages
        self._default_voice = voice
        self._voice: Any = None
        self._speakers: dict[str, int] = {}
        self._name = ""

    @classmethod
    def from_config(cls, table: dict[str, Any], base_dir: Path) -> PiperEngine:
        check_keys(table, KEYS)
        path, packages = weights_source(table, base_dir)
        voice = table.get("voice")
        if voice is not None and not isinstance(voice, str):
            raise ConfigError(f"model {table['id']!r}: `voice` must be a string")
        return cls(table["id"], path=path, packages=packages, voice=voice)

    def _file(self) -> Path:
        return _onnx_file(self.path if self.path is not None else model_dir(self.packages))

    async def load(self, on_progress: ProgressCallback) -> None:
        def load() -> Any:
            from piper import PiperVoice

            return PiperVoice.load(self._file())

        voice = await asyncio.to_thread(load)
        self._speakers = dict(voice.config.speaker_id_map or {})
        self._name = self._file().stem
        self._voice = voice
        on_progress(1.0)

    async def unload(self) -> None:
        self._voice = None

    async def aclose(self) -> None:
        self._voice = None

    def voices(self) -> list[Voice]:
        """Its speakers (a multi-speaker voice) or the one voice, named after its file; before
        a load, the file's name alone is known."""
        if self._speakers:
            return [Voice(name, name) for name in self._speakers]
        stem = self._name or self._peek_name()
        return [Voice(self._default_voice or stem, stem)]

    def _peek_name(self) -> str:
        """The voice file's name without loading it (nor joining any parts)."""
        if self.path is not None:
            return (
                self.path.stem
                if self.path.suffix == ".onnx"
                else next(self.path.glob("*.onnx"), self.path).stem
            )
        for name in self.packages:
            for found in package_dir(name).glob("*.onnx*"):
                if not found.name.endswith(".json"):
                    return found.name.split(".onnx")[0]
        return self.packages[0]

    async def synthesize(self, request: SpeechRequest) -> AsyncIterator[Voiced]:
        voice = self._voice
        if voice is None:
            raise invalid(f"Model {self.model_id!r} is not loaded.", param="model")
        from piper import SynthesisConfig

        # Any voice name is taken (clients send OpenAI's, e.g. "alloy"): a speaker of this
        # model's by its name, else its default voice.
        speaker = self._speakers.get(request.voice or self._default_voice or "")
        scale = voice.config.length_scale / request.speed
        # espeak-ng takes C strings: a NUL in the text is a ValueError there, so it is a space here.
        text = request.input.replace("\x00", " ")
        chunks: Iterator[Any] = iter(
            voice.synthesize(text, SynthesisConfig(speaker_id=speaker, length_scale=scale))
        )

        def step() -> tuple[Any, float] | None:
            started = time.perf_counter()
            chunk = next(chunks, None)
            return None if chunk is None else (chunk, time.perf_counter() - started)

        pending: asyncio.Future[Any] | None = None
        try:
            while True:
                pending = asyncio.ensure_future(asyncio.to_thread(step))
                done = await asyncio.shield(pending)
                pending = None
                if done is None:
                    return
                chunk, seconds = done
                yield Voiced(chunk.audio_int16_bytes, chunk.sample_rate, "".join(chunk.phonemes), seconds)
        finally:
            if pending is not None and not pending.done():
                with contextlib.suppress(BaseException):
                    await asyncio.wait([pending])
