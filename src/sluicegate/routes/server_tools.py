"""Server-side tools for a route: a request's `ToolSet`, the tool loop over the model's rounds,
and closing the set (request-scoped MCP sessions) however the response ends."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from sluicegate.core.errors import SluicegateError
from sluicegate.core.request import ChatRequest
from sluicegate.engines.instances import Generation
from sluicegate.engines.models import Model
from sluicegate.tools.catalog import ToolCatalog, ToolSelection, ToolSet
from sluicegate.tools.loop import loop_generation, model_rounds, run_tool_loop, with_server_tools

log = logging.getLogger(__name__)

_closing: set[asyncio.Task[None]] = set()  # close tasks, kept referenced until done


async def request_toolset(catalog: ToolCatalog, selection: ToolSelection, *, param: str) -> ToolSet:
    """The selected tools; a refused selection is a 400 naming this dialect's parameter."""
    try:
        return await catalog.toolset(selection)
    except SluicegateError as exc:
        info = exc.info
        raise SluicegateError(info.kind, info.message, param=param, code=info.code) from None


def open_generation(
    chat: ChatRequest, model: Model, toolset: ToolSet | None, catalog: ToolCatalog
) -> Generation:
    """Admit the first round (refusing at once, as `Model.open` does) and return the response's
    raw events: with server tools, the tool loop's over as many rounds as it takes."""
    if toolset is None:
        return model.open(chat)
    first = model.open(with_server_tools(chat, toolset))
    # The loop gets the client's own request: it tells client functions from server tools by it.
    rounds = run_tool_loop(chat, toolset, model_rounds(model, first), max_rounds=catalog.max_rounds)
    return loop_generation(first, rounds)


def closing(
    release: Callable[[], None], toolset: ToolSet | None, generation: Generation | None = None
) -> Callable[[], None]:
    """`release`, plus closing the generation (a stream that never started never iterated it)
    and the set in the background: a sync callback for `EventStreamResponse.on_close`, which
    runs however the stream ends, even unstarted."""
    if toolset is None and generation is None:
        return release

    def close() -> None:
        release()
        task = asyncio.get_running_loop().create_task(_close(toolset, generation))
        _closing.add(task)
        task.add_done_callback(_closing.discard)

    return close


async def _close(toolset: ToolSet | None, generation: Generation | None) -> None:
    try:
        if generation is not None:
            await generation.aclose()
    except Exception:
        log.exception("closing a generation failed")
    finally:
        if toolset is not None:
            await toolset.aclose()
