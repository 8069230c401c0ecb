"""`sluicegate keys create|list|get|update|revoke`: runtime API keys, written straight to the
store the config names (no server needed): every replica on that store sees a change within
a second. `create` prints the new secret alone on its last line — the only time it is shown.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from dataclasses import replace
from typing import Any

from sluicegate.config import Settings, store_path
from sluicegate.core.errors import SluicegateError
from sluicegate.store.keys import KeyRecord, KeyRequestError, KeyStore, key_fields, new_record, revoked
from sluicegate.store.keys_backends import open_key_store
from sluicegate.store.usage import UsageStore, Used, open_usage_store, today


def _add_fields(command: argparse.ArgumentParser) -> None:
    command.add_argument("--owner", help="a person or team the key belongs to")
    command.add_argument(
        "--models", action="append", metavar="GLOB", help="a model-id glob it may use (repeat)"
    )
    command.add_argument("--rpm", type=int, help="requests per minute")
    command.add_argument("--tpm", type=int, help="tokens per minute (input and output)")
    command.add_argument("--concurrent", type=int, help="requests in flight at once")
    command.add_argument("--expires-in", type=float, metavar="SECONDS", help="expire this long from now")
    command.add_argument("--budget-tokens", type=int, help="tokens it may use per budget period")
    command.add_argument("--budget-cost", type=float, help="money it may spend per period ([prices])")
    command.add_argument("--budget-period", choices=["day", "month"], default=None, help="default: month")
    command.add_argument("--metadata", help="a JSON object kept with the key")


def add_commands(commands: Any) -> None:
    """The `keys` subcommands, on the `keys` parser's subparsers."""
    create = commands.add_parser("create", help="issue a key; prints its secret on the last line")
    create.add_argument("--name", required=True, help="a unique name (letters, digits, -_.@)")
    _add_fields(create)
    listing = commands.add_parser("list", help="names, limits and state of every key")
    listing.add_argument("--json", action="store_true", help="one JSON object per key")
    get = commands.add_parser("get", help="one key, as JSON")
    get.add_argument("name")
    update = commands.add_parser("update", help="change a key's owner, models, limits, expiry")
    update.add_argument("name")
    _add_fields(update)
    revoke = commands.add_parser("revoke", help="revoke a key (at once on every replica)")
    revoke.add_argument("name")
    for command in (create, listing, get, update, revoke):
        command.add_argument("--config", help="TOML config file naming the store (env SLUICEGATE_CONFIG)")


def _fields(args: argparse.Namespace) -> dict[str, Any]:
    body: dict[str, Any] = {}
    if args.owner is not None:
        body["owner"] = args.owner
    if args.models:
        body["models"] = args.models
    limits = {name: getattr(args, name) for name in ("rpm", "tpm", "concurrent")}
    if any(v is not None for v in limits.values()):
        body["limits"] = limits
    if args.budget_tokens is not None or args.budget_cost is not None:
        body["budget"] = {
            "tokens": args.budget_tokens,
            "cost": args.budget_cost,
            "period": args.budget_period or "month",
        }
    if args.expires_in is not None:
        body["expires_in_seconds"] = args.expires_in
    if args.metadata is not None:
        try:
            body["metadata"] = json.loads(args.metadata)
        except ValueError as exc:
            raise KeyRequestError(f"--metadata is not JSON: {exc}") from exc
    return key_fields(body)


def _line(record: KeyRecord, used: Used | None = None) -> str:
    limits = record.limits
    state = "revoked" if record.revoked_at is not None else "expired" if not record.usable() else "active"
    shown = [
        record.name,
        state,
        f"owner={record.owner or '-'}",
        f"models={','.join(record.models) or '*'}",
        f"rpm={limits.rpm if limits.rpm is not None else '-'}",
        f"tpm={limits.tpm if limits.tpm is not None else '-'}",
        f"concurrent={limits.concurrent if limits.concurrent is not None else '-'}",
    ]
    if record.budget is not None:
        budget = record.budget
        shown.append(f"budget={budget.tokens or '-'} tokens/{budget.cost or '-'} per {budget.period}")
    if used is not None:
        shown.append(f"today: requests={used.requests} tokens={used.tokens} cost={round(used.cost, 6)}")
    return "  ".join(shown)


async def _run(args: argparse.Namespace, store: KeyStore, usage: UsageStore) -> int:
    command = args.keys_command
    if command == "create":
        record, secret = new_record(args.name, **_fields(args))
        await store.insert(record)
        print(_line(record))
        print(secret)
    elif command == "list":
        day = today()
        for record in await store.all():
            used = await usage.spent(record.name, day)
            print(
                json.dumps(record.public() | {"today": used.as_json()}) if args.json else _line(record, used)
            )
    elif command == "get":
        print(json.dumps((await store.get(args.name)).public(), indent=2))
    elif command == "update":
        record = replace(await store.get(args.name), **_fields(args))
        await store.replace(record)
        print(_line(record))
    elif command == "revoke":
        record = revoked(await store.get(args.name))
        await store.replace(record)
        print(_line(record))
    return 0


def run(args: argparse.Namespace, settings: Settings) -> int:
    path, url = store_path(settings), settings.store_url
    store = open_key_store(settings.store_backend, path=path, url=url)
    usage = open_usage_store(settings.store_backend, path=path, url=url)

    async def main() -> int:
        try:
            return await _run(args, store, usage)
        finally:
            await store.aclose()
            await usage.aclose()

    try:
        return asyncio.run(main())
    except KeyRequestError as exc:
        print(f"sluicegate keys: {exc}", file=sys.stderr, flush=True)
        return 1
    except SluicegateError as exc:  # the store cannot be reached: one line, never a traceback
        print(f"sluicegate keys: {exc.info.message}", file=sys.stderr, flush=True)
        return 1
