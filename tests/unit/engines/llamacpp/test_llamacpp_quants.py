"""Q4_0 and Q8_0 GGUFs load and generate without crashing the process.

llama.cpp's CPU "repack" of these formats segfaulted in `llama_decode` on an AVX-512 machine;
the engine turns repacking off unless `repack = true`. Each check runs in a subprocess, so a
crash fails the test instead of killing pytest.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from sluicegate.demo.model import make_demo_gguf
from sluicegate.engines.llamacpp.gguf_info import read_gguf_info

_GENERATE = textwrap.dedent(
    """
    import asyncio, sys
    from pathlib import Path
    from sluicegate.core.events import Finished, RawBatch, TextDelta
    from sluicegate.core.request import ChatRequest, Message, SamplingParams
    from sluicegate.engines.llamacpp import runtime
    from sluicegate.engines.llamacpp.engine import LlamaCppEngine

    runtime._logger.set_verbose = lambda _: None  # keep llama.cpp's load log: the test reads it

    async def main() -> None:
        engine = LlamaCppEngine.from_config(
            {"id": "q", "engine": "llamacpp", "path": sys.argv[1], "batch_size": 8, "context_length": 512},
            Path("."),
        )
        await engine.load(lambda _: None)
        request = ChatRequest(
            model="q",
            messages=[Message("user", "What is the weather in Paris today? " * 4)],
            sampling=SamplingParams(max_tokens=24, seed=1),
        )
        engine.check(request)
        text, finish = "", None
        async for received in engine.generate(request):
            for event in received.events if isinstance(received, RawBatch) else [received]:
                if isinstance(event, TextDelta):
                    text += event.text
                elif isinstance(event, Finished):
                    finish = event.reason
        await engine.aclose()
        print(finish, len(text))

    asyncio.run(main())
    """
)


@pytest.mark.parametrize("quantization", ["Q4_0", "Q8_0"])
def test_quantization_loads_and_generates(quantization: str, tmp_path: Path) -> None:
    model = make_demo_gguf(
        tmp_path / f"demo-{quantization}.gguf", ends_replies=False, quantization=quantization
    )
    assert read_gguf_info(model).quantization == quantization
    done = subprocess.run(
        [sys.executable, "-c", _GENERATE, str(model)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, f"exit {done.returncode}: {done.stderr[-2000:]}"
    finish, length = done.stdout.split()
    assert finish == "length" and int(length) > 0
    # The weights stayed in the plain CPU buffer: llama.cpp did not repack them.
    assert "CPU_Mapped model buffer size" in done.stderr and "CPU_REPACK" not in done.stderr
