"""Layer marks for `bench/start_layers.py`: compiled by mypyc (in a scratch folder) so that each
is a C function callgrind names. An async mark awaits the layer's awaitable, so every step of it
runs inside the mark's generator helper (its inclusive count is the layer's, over all steps); a
sync mark calls the layer's function. Not part of the server: a measuring aid only."""

from __future__ import annotations

from typing import Any


async def mark_app(aw: Any) -> Any:
    return await aw


async def mark_endpoint(aw: Any) -> Any:
    return await aw


async def mark_read_json(aw: Any) -> Any:
    return await aw


async def mark_prepare(aw: Any) -> Any:
    return await aw


async def mark_answer(aw: Any) -> Any:
    return await aw


async def mark_run(aw: Any) -> Any:
    return await aw


async def mark_stream(aw: Any) -> Any:
    return await aw


async def mark_release(aw: Any) -> Any:
    return await aw


async def mark_cycle_send(aw: Any) -> Any:
    return await aw


def mark_parse(f: Any, *args: Any) -> Any:
    return f(*args)


def mark_resolve(f: Any, *args: Any) -> Any:
    return f(*args)


def mark_admission(f: Any, *args: Any) -> Any:
    return f(*args)


def mark_open_model(f: Any, *args: Any) -> Any:
    return f(*args)


def mark_turn_id(f: Any, *args: Any) -> Any:
    return f(*args)


def mark_encoder(f: Any, *args: Any) -> Any:
    return f(*args)


def mark_headers(f: Any, *args: Any) -> Any:
    return f(*args)


def mark_nothing(f: Any, *args: Any) -> Any:
    """Calibration: a sync mark around nothing (its own cost, once a start)."""
    return f(*args)


async def mark_nothing_async(aw: Any) -> Any:
    """Calibration: an async mark around a done awaitable."""
    return await aw
