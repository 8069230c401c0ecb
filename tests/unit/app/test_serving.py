"""app/serving.py: the server settles the garbage collector once everything startup built exists."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from sluicegate.app.serving import YOUNG_THRESHOLD, settle_garbage_collector


@pytest.fixture
def restored_gc() -> Iterator[None]:
    threshold = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)


def test_startup_objects_are_frozen(restored_gc: None) -> None:
    built_at_startup = [{"route": n} for n in range(100)]
    settle_garbage_collector()
    assert gc.get_freeze_count() >= len(built_at_startup)
    assert gc.get_threshold() == (YOUNG_THRESHOLD, 10, 10)  # young collections a burst's starts outlive


def test_the_served_process_freezes_what_its_lifespan_built(restored_gc: None) -> None:
    """The collector is settled after uvicorn's startup (the app's lifespan, its protocols), not
    before: what the lifespan builds lives as long as the process too."""
    import asyncio
    import contextlib
    import socket
    from collections.abc import AsyncIterator

    from starlette.applications import Starlette
    from uvicorn.config import Config

    from sluicegate.app.serving import settled_server

    built: list[object] = []

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        built.append(["pool", []])  # what a registry's start makes (a container: tracked)
        yield

    async def start_and_stop() -> None:
        server = settled_server()(Config(Starlette(lifespan=lifespan), log_level="warning"))
        server.config.load()  # as `Server._serve` does
        server.lifespan = server.config.lifespan_class(server.config)
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            await server.startup(sockets=[sock])
            try:
                young = {id(o) for o in gc.get_objects()}
                assert built and id(built[0]) not in young  # frozen: no collection walks it
            finally:
                await server.shutdown(sockets=[sock])

    gc.unfreeze()
    asyncio.run(start_and_stop())
