"""Images into a llama.cpp context through libmtmd (llama-cpp-python's `mtmd_cpp` bindings).

A model with a projector (`mmproj`) turns its prompt into tokens with images among them:
`Projector.tokenize` gives a `MediaPrompt`, the prompt's token list where each image stands as
`n_pos` placeholder ids (negative, so never a real token, and derived from the image's hash),
plus the image chunks by where they start. The placeholders make everything that compares token
lists work for images too: a prompt that repeats an earlier turn's image shares that prefix with
the cache, so its cells are reused and reported as cached tokens.

The text between images is decoded as ever (with other sequences, in the scheduler's batch);
an image is encoded by the projector and its embeddings decoded in `llama_decode`s of their own:
whole (`Projector.decode`), or, in the batch scheduler, a prompt chunk per step (`encode`, then
`LlamaRuntime.decode_image_part`). Every use of the text context runs on the engine's worker
thread. The batch scheduler runs the image encoder itself on a thread of the projector's own
(`encode_soon`; it ends when no image is left, see `_Encoder`): a real ViT takes seconds on a
CPU, which the other sequences would otherwise wait for with their next token; they go on
decoding meanwhile (the encoder has its own ggml backend, and llama-server runs `mtmd_tokenize`
beside its encoder the same way).

Audio (a projector with an audio encoder) takes the same path: libmtmd's helper decodes the
WAV or MP3 and resamples it to the encoder's rate (the decoder llama-server uses), and each
30-second window of it becomes one media chunk, an `ImageSpan` like an image's.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import llama_cpp
from llama_cpp import _logger

from sluicegate.core.audio import Sound
from sluicegate.core.errors import EngineFailure, invalid
from sluicegate.core.images import Picture
from sluicegate.engines.llamacpp.gguf_header import read_gguf_header

if TYPE_CHECKING:  # libmtmd's bindings and numpy where a projector first needs them (bindings.py)
    import numpy as np

MARKER = "<__media__>"  # libmtmd's default media marker: where an image goes in the rendered prompt
_TEXT = 0  # MTMD_INPUT_CHUNK_TYPE_TEXT
_AUDIO = 2  # MTMD_INPUT_CHUNK_TYPE_AUDIO
_MIN_AUDIO_SECONDS = 0.01  # less is refused: libmtmd's preprocessor asserts on a clip of 1 sample
Media = Picture | Sound  # what stands at a marker: an image, or (with an audio encoder) a clip
_logs_routed = False


def _route_logs() -> None:
    """libmtmd logs every image it encodes; through llama.cpp's logger, only errors show."""
    from llama_cpp import mtmd_cpp as mtmd

    global _logs_routed
    if not _logs_routed:
        mtmd.mtmd_log_set(_logger.llama_log_callback, ctypes.c_void_p(0))
        mtmd.mtmd_helper_log_set(_logger.llama_log_callback, ctypes.c_void_p(0))
        _logs_routed = True


def find_projector(model: Path) -> Path | None:
    """An `mmproj*.gguf` beside the model, as LM Studio and llama-server's `-hf` keep them:
    the one named after the model if there are several."""
    found = sorted(p for p in model.parent.glob("mmproj*.gguf") if p.is_file())
    if not found:
        return None
    named = [p for p in found if model.stem in p.stem]
    return (named or found)[0]


def projector_senses(path: Path) -> tuple[bool, bool]:
    """Whether the projector file has a vision encoder and an audio encoder, by its header (as
    libmtmd reads it); a header it cannot read counts as vision, for the load to say what is wrong."""
    try:
        fields = read_gguf_header(path).fields
    except (OSError, ValueError):
        return True, False
    return bool(fields.get("clip.has_vision_encoder", False)), bool(
        fields.get("clip.has_audio_encoder", False)
    )


def placeholder(digest: str, window: int = 0) -> int:
    """The id every position of an image stands as: negative, and the same for the same image
    (for audio, the same clip's same 30-second window)."""
    if window:
        digest = hashlib.sha256(f"{digest}/{window}".encode()).hexdigest()
    return -1 - int(digest[:8], 16) % (1 << 30)


@dataclass(slots=True)
class ImageSpan:
    chunk: Any  # an owned mtmd_input_chunk copy
    n_pos: int  # positions (= prompt tokens) it takes
    n_tokens: int  # embeddings it decodes to
    audio: bool = False  # a window of an audio clip, not an image
    # Encoded, while the batch scheduler decodes it a prompt chunk at a time.
    embeddings: np.ndarray | None = None
    # The encoder at work on it (`Projector.encode_soon`); the chunk lives until it is done.
    encoding: Future[None] | None = None

    def settle(self) -> None:
        """Wait for an encoder still at work on this image (before its chunk is freed)."""
        if self.encoding is not None:
            with contextlib.suppress(BaseException):
                self.encoding.result()
            self.encoding = None


@dataclass(slots=True)
class MediaPrompt:
    tokens: list[int]
    images: dict[int, ImageSpan] = field(default_factory=dict)  # by the index it starts at (audio too)
    audio_tokens: int = 0  # of `tokens`, those audio takes (kept after `free`, for the usage)

    def span_at(self, index: int) -> ImageSpan | None:
        return self.images.get(index)

    def covering(self, index: int) -> tuple[int, ImageSpan] | None:
        """The image whose positions include `index`, and where it starts."""
        for start, span in self.images.items():
            if start <= index < start + span.n_pos:
                return start, span
        return None

    def next_image(self, index: int) -> int | None:
        """Where the first image at or after `index` starts."""
        starts = [start for start in self.images if start >= index]
        return min(starts) if starts else None

    def snap(self, keep: int) -> int:
        """A cached prefix never ends inside an image: cut it back to the image's start."""
        for start, span in self.images.items():
            if start < keep < start + span.n_pos:
                return start
        return keep

    def free(self) -> None:
        from llama_cpp import mtmd_cpp as mtmd

        for span in self.images.values():
            span.settle()
            mtmd.mtmd_input_chunk_free(span.chunk)
        self.images.clear()


class _Encoder:
    """Encodes one at a time on a thread of their own that ends when none is left.

    Not a thread that lives on: the encoder's ggml backend runs OpenMP, and a thread that ran
    an OpenMP region keeps a pool of OpenMP threads for as long as it lives. libgomp counts
    every pool's threads, and while they outnumber the CPUs, every OpenMP team in the process
    (the text model's decode too) spins 100 times instead of 300,000 at a barrier before it
    sleeps on a futex: a decode step of 4 sequences on 2 cores then slept and woke ~100 times,
    and a batch ran ~20% slower for as long as the server lived after its first image. A
    thread that ends frees its pool (libgomp's `gomp_free_thread`), and the count with it.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queue: deque[tuple[Future[None], Callable[[], None]]] = deque()
        self._thread: threading.Thread | None = None

    def submit(self, work: Callable[[], None]) -> Future[None]:
        future: Future[None] = Future()
        with self._lock:
            self._queue.append((future, work))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="mtmd-encoder", daemon=True)
                self._thread.start()
        return future

    def _run(self) -> None:
        while True:
            with self._lock:
                if not self._queue:
                    self._thread = None
                    return
                future, work = self._queue.popleft()
            if not future.set_running_or_notify_cancel():
                continue
            try:
                work()
            except BaseException as exc:
                future.set_exception(exc)
            else:
                future.set_result(None)

    def drain(self) -> None:
        """Until every encode submitted has ended (never free the context under one)."""
        while True:
            with self._lock:
                thread = self._thread
            if thread is None:
                return
            thread.join()


class Projector:
    """A loaded mmproj file, bound to the loaded text model (or, only to count a prompt's
    tokens, to its tokenizer alone: `warmup=False` then skips the encoder's trial run).

    `tokenize` may run on another thread than `encode`/`decode` (llama-server tokenizes on its
    HTTP threads while its loop encodes): it only preprocesses pixels and counts."""

    def __init__(self, path: Path, model: Any, *, threads: int, use_gpu: bool, warmup: bool = True) -> None:
        from llama_cpp import mtmd_cpp as mtmd

        _route_logs()
        params = mtmd.mtmd_context_params_default()
        params.use_gpu = use_gpu
        params.n_threads = threads
        params.print_timings = False
        params.warmup = warmup
        self._marker = MARKER.encode()
        params.media_marker = self._marker
        self._encoder = _Encoder()  # `encode_soon`'s thread, while it has an image
        self.ctx = mtmd.mtmd_init_from_file(str(path).encode(), model, params)
        if not self.ctx:
            raise ValueError(f"libmtmd could not load the projector {path}")
        self.vision = bool(mtmd.mtmd_support_vision(self.ctx))
        self.audio = bool(mtmd.mtmd_support_audio(self.ctx))
        if not self.vision and not self.audio:
            self.close()
            raise ValueError(f"the projector {path} has neither a vision nor an audio encoder")

    def close(self) -> None:
        self._encoder.drain()  # never free the context under a running encode
        from llama_cpp import mtmd_cpp as mtmd

        if self.ctx:
            mtmd.mtmd_free(self.ctx)
            self.ctx = None

    def tokenize(self, prompt: str, pictures: list[Media]) -> MediaPrompt:
        """The prompt (with one `MARKER` per picture or clip, in order) as tokens and media chunks."""
        from llama_cpp import mtmd_cpp as mtmd

        if prompt.count(MARKER) != len(pictures):
            raise invalid(
                f"The prompt has {prompt.count(MARKER)} image markers ({MARKER!r}) for {len(pictures)} "
                "images; a message's text must not contain the marker itself.",
                code="invalid_image",
            )
        bitmaps = []
        chunks = mtmd.mtmd_input_chunks_init()
        try:
            for picture in pictures:
                if isinstance(picture, Sound):
                    bitmaps.append(self._audio_bitmap(picture))
                    continue
                pixels = (ctypes.c_uint8 * len(picture.rgb)).from_buffer_copy(picture.rgb)
                bitmap = mtmd.mtmd_bitmap_init(picture.width, picture.height, pixels)
                if not bitmap:
                    raise EngineFailure("libmtmd could not take an image", code="engine_error")
                bitmaps.append(bitmap)
                mtmd.mtmd_bitmap_set_id(bitmap, picture.digest.encode())
            data = prompt.encode("utf-8")
            text = mtmd.mtmd_input_text(data, len(data), True, True)
            array = (mtmd.mtmd_bitmap_p_ctypes * len(bitmaps))(*bitmaps)
            status = mtmd.mtmd_tokenize(self.ctx, chunks, ctypes.byref(text), array, len(bitmaps))
            if status != 0:
                raise EngineFailure(f"libmtmd could not tokenize the prompt ({status})", code="engine_error")
            return self._media_prompt(chunks)
        finally:
            for bitmap in bitmaps:
                mtmd.mtmd_bitmap_free(bitmap)
            mtmd.mtmd_input_chunks_free(chunks)

    def _audio_bitmap(self, sound: Sound) -> Any:
        """The clip's samples, decoded and resampled by libmtmd's helper (WAV, MP3), with its
        SHA-256 as the bitmap's id. A clip it cannot decode is the client's error: a 400."""
        from llama_cpp import mtmd_cpp as mtmd

        if not self.audio:
            raise invalid("This model's projector has no audio encoder.", code="audio_input_unsupported")
        data = (ctypes.c_uint8 * len(sound.data)).from_buffer_copy(sound.data)
        bitmap = mtmd.mtmd_helper_bitmap_init_from_buf(self.ctx, data, len(sound.data), False)
        if not bitmap:
            raise invalid(
                f"Invalid audio: the {sound.format} data could not be decoded.", code="invalid_audio"
            )
        samples = int(mtmd.mtmd_bitmap_get_nx(bitmap))
        if not mtmd.mtmd_bitmap_is_audio(bitmap) or samples < _MIN_AUDIO_SECONDS * self.sample_rate:
            mtmd.mtmd_bitmap_free(bitmap)
            raise invalid(
                f"Invalid audio: the {sound.format} data has (almost) no samples.", code="invalid_audio"
            )
        return bitmap

    @property
    def sample_rate(self) -> int:
        """The rate libmtmd resamples audio to for this projector's encoder."""
        from llama_cpp import mtmd_cpp as mtmd

        return int(mtmd.mtmd_get_audio_sample_rate(self.ctx))

    def _media_prompt(self, chunks: Any) -> MediaPrompt:
        from llama_cpp import mtmd_cpp as mtmd

        out = MediaPrompt([])
        previous, window = b"", 0  # a clip longer than 30 s is several chunks in a row
        try:
            for i in range(mtmd.mtmd_input_chunks_size(chunks)):
                chunk = mtmd.mtmd_input_chunks_get(chunks, i)
                kind = mtmd.mtmd_input_chunk_get_type(chunk)
                if kind == _TEXT:
                    count = ctypes.c_size_t()
                    pointer = mtmd.mtmd_input_chunk_get_tokens_text(chunk, ctypes.byref(count))
                    out.tokens.extend(pointer[: count.value])
                    previous = b""
                    continue
                digest = mtmd.mtmd_input_chunk_get_id(chunk) or b"0"  # the bitmap's: its SHA-256
                window = window + 1 if kind == _AUDIO and digest == previous else 0
                previous = digest
                n_pos = int(mtmd.mtmd_input_chunk_get_n_pos(chunk))
                span = ImageSpan(
                    mtmd.mtmd_input_chunk_copy(chunk),
                    n_pos,
                    int(mtmd.mtmd_input_chunk_get_n_tokens(chunk)),
                    audio=kind == _AUDIO,
                )
                out.images[len(out.tokens)] = span
                out.tokens.extend([placeholder(digest.decode(), window)] * n_pos)
                out.audio_tokens += n_pos if span.audio else 0
            if out.tokens and out.tokens[-1] < 0:  # its last token must give logits
                # A chat template always ends with text; a raw prompt (`multimodal_data`) may
                # not: the client's to fix, a 400.
                raise invalid(
                    "The prompt cannot end with an image or audio: put text after the last media marker.",
                    param="prompt",
                    code="invalid_image",
                )
        except BaseException:
            out.free()
            raise
        return out

    def splittable(self, span: ImageSpan) -> bool:
        """Whether the image's embeddings may be decoded a few at a time: one position each and
        causal attention (not M-RoPE, not Gemma 3's non-causal images, which go whole)."""
        from llama_cpp import mtmd_cpp as mtmd

        return (
            span.n_pos == span.n_tokens
            and not mtmd.mtmd_decode_use_mrope(self.ctx)
            and not mtmd.mtmd_decode_use_non_causal(self.ctx, span.chunk)
        )

    def encode(self, span: ImageSpan, n_embd: int) -> None:
        """Run the image encoder; its embeddings are kept on the span."""
        import numpy as np
        from llama_cpp import mtmd_cpp as mtmd

        if mtmd.mtmd_encode_chunk(self.ctx, span.chunk) != 0:
            raise EngineFailure("the projector could not encode an image", code="decode_failed")
        pointer = mtmd.mtmd_get_output_embd(self.ctx)
        span.embeddings = np.ctypeslib.as_array(pointer, shape=(span.n_tokens, n_embd)).copy()

    def encode_soon(self, span: ImageSpan, n_embd: int, done: Callable[[], None]) -> None:
        """`encode` on the projector's own thread; `done()` is called (on that thread) after.
        One image at a time: libmtmd keeps one output buffer per context."""
        span.encoding = self._encoder.submit(lambda: self.encode(span, n_embd))
        span.encoding.add_done_callback(lambda _future: done())

    def decode(self, context: Any, span: ImageSpan, *, position: int, seq_id: int, n_batch: int) -> None:
        """Encode the image and decode its embeddings into sequence `seq_id` at `position`."""
        from llama_cpp import mtmd_cpp as mtmd

        if mtmd.mtmd_encode_chunk(self.ctx, span.chunk) != 0:
            raise EngineFailure("the projector could not encode an image", code="decode_failed")
        embeddings = mtmd.mtmd_get_output_embd(self.ctx)
        new_position = llama_cpp.llama_pos(0)
        status = mtmd.mtmd_helper_decode_image_chunk(
            self.ctx,
            context,
            span.chunk,
            embeddings,
            position,
            seq_id,
            n_batch,
            ctypes.byref(new_position),
            mtmd.mtmd_helper_post_decode_callback(),  # a NULL function pointer: none
            None,
        )
        if status != 0:
            raise EngineFailure(f"llama_decode failed on an image ({status})", code="decode_failed")
