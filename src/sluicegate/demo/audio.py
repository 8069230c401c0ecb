"""A tiny audio projector (mmproj) GGUF for the demo model, with random weights.

libmtmd loads it as an Ultravox projector (`clip.projector_type = "ultravox"`): a Whisper-style
encoder (two 1-D convolutions over the log-mel frames, positions, one transformer layer), frames
stacked `STACK` at a time, then Ultravox's RMS-normed SwiGLU MLP into the text model's embedding
space. libmtmd cuts audio into 30-second windows of 3000 mel frames (the last one padded), so
each started half-minute becomes `TOKENS_PER_WINDOW` embeddings in its place in the prompt. What
it "hears" is nonsense, but it is a function of the samples: two different sounds give different
replies, the same sound the same one. Ultravox rather than Qwen2-Audio (whose projector is a
single linear layer) because its stacking keeps a window at 50 prompt tokens instead of 750.
"""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np

from sluicegate.demo.model import SHAPES, finish_gguf, make_demo_gguf
from sluicegate.demo.vision import VISION_MIXING, add_encoder_blocks, projector_path

SAMPLE_RATE = 16_000  # what libmtmd's Whisper preprocessor resamples every input to
_MEL_BINS = 80
_FRAMES = 3000  # one 30-second window; Whisper's first convolution keeps it, the second halves it
_POSITIONS = _FRAMES // 2
STACK = 30  # frames the projector stacks into one embedding: 1500 / 30 = 50 per window
TOKENS_PER_WINDOW = _POSITIONS // STACK
_AUDIO_EMBD = 64
_AUDIO_HEADS = 4
_AUDIO_FF = 128
_AUDIO_LAYERS = 1
_PROJ_HIDDEN = 128


def make_demo_audio_projector(path: str | Path, *, text_embd: int, seed: int = 0) -> Path:
    """Write an audio projector whose output has `text_embd` dimensions (the text model's)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed + 2)
    n, ff = _AUDIO_EMBD, _AUDIO_FF

    def dense(rows: int, cols: int) -> np.ndarray:
        weights: np.ndarray = (rng.standard_normal((rows, cols)) / np.sqrt(cols)).astype(np.float32)
        return weights

    def zeros(*shape: int) -> np.ndarray:
        return np.zeros(shape, dtype=np.float32)

    def conv(out_channels: int, in_channels: int) -> np.ndarray:
        # ggml's 1-D kernel is [K, IC, OC]: numpy (OC, IC, K); F16 as real Whisper encoders.
        kernel: np.ndarray = (
            rng.standard_normal((out_channels, in_channels, 3)) / np.sqrt(3 * in_channels)
        ).astype(np.float16)
        return kernel

    tmp = path.with_name(path.name + ".partial")
    writer = gguf.GGUFWriter(str(tmp), "clip")
    writer.add_name("Sluicegate demo audio projector (random weights)")
    writer.add_description("A tiny Ultravox-style audio projector written by Sluicegate for its demo model.")
    writer.add_string("clip.projector_type", "ultravox")
    writer.add_bool("clip.has_vision_encoder", False)
    writer.add_bool("clip.has_audio_encoder", True)
    writer.add_uint32("clip.audio.num_mel_bins", _MEL_BINS)
    writer.add_uint32("clip.audio.embedding_length", n)
    writer.add_uint32("clip.audio.feed_forward_length", ff)
    writer.add_uint32("clip.audio.projection_dim", text_embd)
    writer.add_uint32("clip.audio.attention.head_count", _AUDIO_HEADS)
    writer.add_float32("clip.audio.attention.layer_norm_epsilon", 1e-5)
    writer.add_uint32("clip.audio.block_count", _AUDIO_LAYERS)
    writer.add_uint32("clip.audio.projector.stack_factor", STACK)

    # Biases of the convolutions are [1, OC] in ggml, to broadcast over the frames.
    writer.add_tensor("a.conv1d.1.weight", conv(n, _MEL_BINS))
    writer.add_tensor("a.conv1d.1.bias", zeros(n, 1))
    writer.add_tensor("a.conv1d.2.weight", conv(n, n))
    writer.add_tensor("a.conv1d.2.bias", zeros(n, 1))
    writer.add_tensor(
        "a.position_embd.weight", (rng.standard_normal((_POSITIONS, n)) * 0.1).astype(np.float32)
    )
    add_encoder_blocks(
        writer, "a", _AUDIO_LAYERS, n, ff, dense, key_bias=False
    )  # Whisper's encoder asserts it
    writer.add_tensor("a.post_ln.weight", np.ones(n, dtype=np.float32))
    writer.add_tensor("a.post_ln.bias", zeros(n))
    stacked = n * STACK
    writer.add_tensor("mm.a.norm_pre.weight", np.ones(stacked, dtype=np.float32))
    writer.add_tensor("mm.a.mlp.1.weight", dense(2 * _PROJ_HIDDEN, stacked))  # SwiGLU: gate and value
    writer.add_tensor("mm.a.norm_mid.weight", np.ones(_PROJ_HIDDEN, dtype=np.float32))
    # Outputs of about unit size per dimension, like the demo's token embeddings' noise.
    writer.add_tensor("mm.a.mlp.2.weight", dense(text_embd, _PROJ_HIDDEN) * 2.0)

    return finish_gguf(writer, tmp, path)


def make_demo_audio(
    path: str | Path, *, size: str = "tiny", seed: int = 0, ends_replies: bool = True
) -> Path:
    """Write the demo model to `path` and its audio projector beside it; return the projector's
    path (`mmproj-<name>.gguf`, where `find_projector` looks)."""
    model = make_demo_gguf(path, size=size, seed=seed, ends_replies=ends_replies, mixing=VISION_MIXING)
    return make_demo_audio_projector(projector_path(model), text_embd=SHAPES[size].n_embd, seed=seed)
