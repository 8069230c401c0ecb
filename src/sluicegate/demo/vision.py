"""A tiny vision projector (mmproj) GGUF for the demo model, with random weights.

libmtmd loads it as a LLaVA-style projector (`clip.projector_type = "mlp"`): a two-layer ViT
over 8x8 patches of a 32x32 image, then a two-layer MLP into the text model's embedding space.
So an image becomes 16 embeddings the demo model reads in its place in the prompt. What it
"sees" is nonsense, but it is a function of the pixels: two different images give different
replies, the same image the same one. The simplest projector llama.cpp has; a test checks that
the installed libmtmd still loads it and encodes an image with it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import gguf
import numpy as np

from sluicegate.demo.model import SHAPES, finish_gguf, make_demo_gguf

IMAGE_SIZE = 32
PATCH_SIZE = 8
IMAGE_TOKENS = (IMAGE_SIZE // PATCH_SIZE) ** 2  # what one image costs in the prompt
_VISION_EMBD = 64
_VISION_HEADS = 4
_VISION_FF = 128
_VISION_LAYERS = 2  # LLaVA reads the second-to-last layer: one runs
_PROJ_HIDDEN = 128
# The demo model's attention scale with a projector: at the text demo's 0.02, what comes before
# a token hardly moves its output, and every image would get the same reply.
VISION_MIXING = 0.1


def projector_path(model: Path) -> Path:
    """Where `make_demo_vision` puts the projector: beside the model, as `mmproj-<name>.gguf`
    (the name `find_projector` looks for)."""
    return model.with_name(f"mmproj-{model.stem}.gguf")


def add_encoder_blocks(
    writer: gguf.GGUFWriter,
    prefix: str,
    layers: int,
    n: int,
    ff: int,
    dense: Callable[[int, int], np.ndarray],
    *,
    key_bias: bool = True,
) -> None:
    """A projector encoder's transformer blocks (`<prefix>.blk.N.*`, as clip.cpp names them):
    norms of 1, biases of 0, `dense(rows, cols)` weights. Whisper's key projection has no bias."""
    for layer in range(layers):
        blk = f"{prefix}.blk.{layer}"
        for norm in ("ln1", "ln2"):
            writer.add_tensor(f"{blk}.{norm}.weight", np.ones(n, dtype=np.float32))
            writer.add_tensor(f"{blk}.{norm}.bias", np.zeros(n, dtype=np.float32))
        for name in ("attn_q", "attn_k", "attn_v", "attn_out"):
            writer.add_tensor(f"{blk}.{name}.weight", dense(n, n))
            if key_bias or name != "attn_k":
                writer.add_tensor(f"{blk}.{name}.bias", np.zeros(n, dtype=np.float32))
        writer.add_tensor(f"{blk}.ffn_up.weight", dense(ff, n))
        writer.add_tensor(f"{blk}.ffn_up.bias", np.zeros(ff, dtype=np.float32))
        writer.add_tensor(f"{blk}.ffn_down.weight", dense(n, ff))
        writer.add_tensor(f"{blk}.ffn_down.bias", np.zeros(n, dtype=np.float32))


def make_demo_projector(
    path: str | Path, *, text_embd: int, seed: int = 0, image_size: int = IMAGE_SIZE
) -> Path:
    """Write a projector whose output has `text_embd` dimensions (the text model's); an image
    costs `(image_size / PATCH_SIZE)²` prompt tokens."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed + 1)
    n, ff = _VISION_EMBD, _VISION_FF
    n_pos = (image_size // PATCH_SIZE) ** 2

    def dense(rows: int, cols: int) -> np.ndarray:
        weights: np.ndarray = (rng.standard_normal((rows, cols)) / np.sqrt(cols)).astype(np.float32)
        return weights

    def zeros(size: int) -> np.ndarray:
        return np.zeros(size, dtype=np.float32)

    tmp = path.with_name(path.name + ".partial")
    writer = gguf.GGUFWriter(str(tmp), "clip")
    writer.add_name("Sluicegate demo projector (random weights)")
    writer.add_description("A tiny LLaVA-style projector written by Sluicegate for its demo model.")
    writer.add_string("clip.projector_type", "mlp")
    writer.add_bool("clip.has_vision_encoder", True)
    writer.add_bool("clip.has_audio_encoder", False)
    writer.add_bool("clip.use_gelu", True)
    writer.add_uint32("clip.vision.image_size", image_size)
    writer.add_uint32("clip.vision.patch_size", PATCH_SIZE)
    writer.add_uint32("clip.vision.embedding_length", n)
    writer.add_uint32("clip.vision.feed_forward_length", ff)
    writer.add_uint32("clip.vision.projection_dim", text_embd)
    writer.add_uint32("clip.vision.attention.head_count", _VISION_HEADS)
    writer.add_float32("clip.vision.attention.layer_norm_epsilon", 1e-6)
    writer.add_uint32("clip.vision.block_count", _VISION_LAYERS)
    writer.add_array("clip.vision.image_mean", [0.5, 0.5, 0.5])
    writer.add_array("clip.vision.image_std", [0.5, 0.5, 0.5])

    # ggml's conv kernel is [KW, KH, IC, OC]: numpy (OC, IC, KH, KW); F16 as real projectors.
    patch = rng.standard_normal((n, 3, PATCH_SIZE, PATCH_SIZE)) / np.sqrt(3 * PATCH_SIZE * PATCH_SIZE)
    writer.add_tensor("v.patch_embd.weight", patch.astype(np.float16))
    writer.add_tensor("v.patch_embd.bias", zeros(n))
    writer.add_tensor("v.position_embd.weight", (rng.standard_normal((n_pos, n)) * 0.1).astype(np.float32))
    add_encoder_blocks(writer, "v", _VISION_LAYERS, n, ff, dense)
    writer.add_tensor("mm.0.weight", dense(_PROJ_HIDDEN, n))
    writer.add_tensor("mm.0.bias", zeros(_PROJ_HIDDEN))
    # Outputs of about unit size per dimension, like the demo's token embeddings' noise.
    writer.add_tensor("mm.2.weight", dense(text_embd, _PROJ_HIDDEN) * 2.0)
    writer.add_tensor("mm.2.bias", zeros(text_embd))

    return finish_gguf(writer, tmp, path)


def make_demo_vision(
    path: str | Path,
    *,
    size: str = "tiny",
    seed: int = 0,
    ends_replies: bool = True,
    image_size: int = IMAGE_SIZE,
) -> Path:
    """Write the demo model to `path` and its projector beside it; return the projector's path."""
    model = make_demo_gguf(path, size=size, seed=seed, ends_replies=ends_replies, mixing=VISION_MIXING)
    return make_demo_projector(
        projector_path(model), text_embd=SHAPES[size].n_embd, seed=seed, image_size=image_size
    )
