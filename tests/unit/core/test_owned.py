"""core/owned.py: one owner releases everything a request took, on every path."""

from __future__ import annotations

import asyncio

import pytest

from sluicegate.core.owned import Owned


async def test_releases_last_taken_first_once() -> None:
    released: list[str] = []

    async def release_async(name: str) -> None:
        await asyncio.sleep(0)
        released.append(name)

    owned = Owned()
    owned.callback(released.append, "admission")
    owned.push_async_callback(release_async, "tools")
    owned.callback(released.append, "generation")
    await owned.aclose()
    await owned.aclose()  # a second close has nothing left to release
    assert released == ["generation", "tools", "admission"]


async def test_releases_on_an_exception_and_lets_it_through() -> None:
    released: list[str] = []
    with pytest.raises(ValueError, match="parse"):
        async with Owned() as owned:
            owned.callback(released.append, "admission")
            raise ValueError("parse")
    assert released == ["admission"]


async def test_a_failing_release_does_not_stop_the_others() -> None:
    released: list[str] = []

    def broken() -> None:
        raise RuntimeError("first")

    async def cancelled() -> None:
        raise asyncio.CancelledError

    owned = Owned()
    owned.callback(released.append, "admission")
    owned.callback(broken)
    owned.push_async_callback(cancelled)
    with pytest.raises(RuntimeError, match="first") as raised:
        await owned.aclose()
    assert released == ["admission"]
    assert isinstance(raised.value.__context__, asyncio.CancelledError)


async def test_pop_all_hands_everything_to_a_new_owner() -> None:
    released: list[str] = []
    async with Owned() as request:
        request.callback(released.append, "admission")
        run = request.pop_all()
    assert released == []  # the request ended; the run still holds its place
    async with run:
        pass
    assert released == ["admission"]
