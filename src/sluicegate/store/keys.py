"""API keys issued at runtime: their records, and where they are kept.

A key is created by an admin (the admin API, or `sluicegate keys` from a terminal); its secret
is shown once and stored only as a SHA-256 digest, so the store never holds a usable key. The
record carries what the gateway enforces: the models it may use (globs), an expiry, and its
limits (requests and tokens per minute, requests in flight); and what people read: a name,
an owner or team, metadata.

Every replica keeps a copy of all records in memory (`app/keyring.py`) and asks the store a
cheap question every half second — has the key table changed (`version`)? — so a key created
or revoked anywhere works, or stops working, everywhere within a second. Keys in the config
file are not here: they keep working as before.

Two backends, the same two as the response store: SQLite (the store's own file, a table of
its own) and Redis (a hash and a version counter), chosen by `open_key_store`.
"""

from __future__ import annotations

import fnmatch
import hashlib
import secrets
import time
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal

SECRET_PREFIX = "sk-sg-"
MAX_NAME = 64
NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.@")


class KeyRequestError(ValueError):
    """A key operation a caller got wrong (an unknown name, a duplicate, a bad field)."""

    def __init__(self, message: str, *, code: str = "invalid_key_request", status: int = 400) -> None:
        super().__init__(message)
        self.code = code
        self.status = status


def new_secret() -> str:
    return SECRET_PREFIX + secrets.token_urlsafe(32)


def secret_digest(secret: bytes) -> str:
    return hashlib.sha256(secret).hexdigest()


@dataclass(frozen=True, slots=True)
class KeyLimits:
    """What one key may use; None: no limit."""

    rpm: int | None = None  # requests per minute
    tpm: int | None = None  # tokens per minute (input and output, as the engines report them)
    concurrent: int | None = None  # requests in flight at once

    @property
    def any(self) -> bool:
        return self.rpm is not None or self.tpm is not None or self.concurrent is not None

    def as_json(self) -> dict[str, int | None]:
        return {"rpm": self.rpm, "tpm": self.tpm, "concurrent": self.concurrent}


@dataclass(frozen=True, slots=True)
class KeyBudget:
    """What one key may spend over a period (UTC day or month): tokens, money, or both."""

    tokens: int | None = None
    cost: float | None = None  # in the price table's currency (`[prices]`)
    period: Literal["day", "month"] = "month"

    def as_json(self) -> dict[str, Any]:
        return {"tokens": self.tokens, "cost": self.cost, "period": self.period}


TEAM_PREFIX = "team:"  # a team's counters and usage rows (a key's name cannot hold ':')


@dataclass(frozen=True, slots=True)
class Team:
    """`[teams.NAME]`: limits and a budget that every runtime key whose `owner` is NAME counts
    against together, beside its own."""

    name: str
    limits: KeyLimits = field(default_factory=KeyLimits)
    budget: KeyBudget | None = None

    @property
    def counter(self) -> str:
        """The name its limits are counted and its usage is kept under."""
        return TEAM_PREFIX + self.name

    @classmethod
    def from_config(cls, name: str, entry: dict[str, Any]) -> Team:
        """From the config's checked table (`config.py` `_apply_teams`)."""
        budget = entry.get("budget")
        return cls(
            name,
            KeyLimits(entry.get("rpm"), entry.get("tpm"), entry.get("concurrent")),
            None if not budget else KeyBudget(budget.get("tokens"), budget.get("cost"), budget["period"]),
        )

    def public(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "limits": self.limits.as_json(),
            "budget": None if self.budget is None else self.budget.as_json(),
        }


@dataclass(frozen=True, slots=True)
class KeyRecord:
    name: str
    digest: str  # sha256 of the secret, hex
    created_at: int
    hint: str = ""  # the secret's last four characters, to tell keys apart in a listing
    owner: str | None = None  # a person or a team
    models: tuple[str, ...] = ()  # globs of the model ids it may use; empty: all
    expires_at: int | None = None  # unix seconds; None: never
    revoked_at: int | None = None
    limits: KeyLimits = field(default_factory=KeyLimits)
    metadata: dict[str, Any] = field(default_factory=dict)
    budget: KeyBudget | None = None

    def usable(self, now: float | None = None) -> bool:
        """Not revoked and not expired."""
        if self.revoked_at is not None:
            return False
        return self.expires_at is None or (time.time() if now is None else now) < self.expires_at

    def allows(self, model: str) -> bool:
        """Whether the key may use `model` (its globs; none: every model)."""
        return not self.models or any(fnmatch.fnmatchcase(model, glob) for glob in self.models)

    def public(self) -> dict[str, Any]:
        """The record as the admin API and `sluicegate keys list` show it: never the digest."""
        return {
            "name": self.name,
            "key_hint": f"{SECRET_PREFIX}…{self.hint}" if self.hint else None,
            "owner": self.owner,
            "models": list(self.models),
            "created_at": self.created_at,
            "expires_at": self.expires_at,
            "revoked_at": self.revoked_at,
            "limits": self.limits.as_json(),
            "budget": None if self.budget is None else self.budget.as_json(),
            "metadata": self.metadata,
        }

    def dump(self) -> dict[str, Any]:
        data = asdict(self)
        data["models"] = list(self.models)
        return data

    @classmethod
    def load(cls, data: dict[str, Any]) -> KeyRecord:
        limits = data.get("limits") or {}
        budget = data.get("budget")
        return cls(
            name=data["name"],
            digest=data["digest"],
            created_at=int(data["created_at"]),
            hint=data.get("hint", ""),
            owner=data.get("owner"),
            models=tuple(data.get("models") or ()),
            expires_at=data.get("expires_at"),
            revoked_at=data.get("revoked_at"),
            limits=KeyLimits(limits.get("rpm"), limits.get("tpm"), limits.get("concurrent")),
            metadata=dict(data.get("metadata") or {}),
            budget=None
            if not budget
            else KeyBudget(budget.get("tokens"), budget.get("cost"), budget["period"]),
        )


def check_name(name: object) -> str:
    if not isinstance(name, str) or not name or len(name) > MAX_NAME or not set(name) <= NAME_CHARS:
        raise KeyRequestError(
            f"A key's name is 1 to {MAX_NAME} characters of letters, digits and '-_.@'.", code="invalid_name"
        )
    return name


def new_record(name: str, **fields: Any) -> tuple[KeyRecord, str]:
    """A new record and its secret (shown once, never stored)."""
    secret = new_secret()
    record = KeyRecord(
        name=check_name(name),
        digest=secret_digest(secret.encode()),
        created_at=int(time.time()),
        hint=secret[-4:],
        **fields,
    )
    return record, secret


def revoked(record: KeyRecord) -> KeyRecord:
    return record if record.revoked_at is not None else replace(record, revoked_at=int(time.time()))


class KeyStore(ABC):
    """Where the runtime keys live. Every write returns once it is durable, and bumps the
    version every replica polls."""

    @abstractmethod
    async def version(self) -> int:
        """A number that changes whenever any key is written (cheap: polled twice a second)."""

    @abstractmethod
    async def all(self) -> list[KeyRecord]:
        """Every record, revoked ones included (a listing shows them; auth skips them)."""

    @abstractmethod
    async def insert(self, record: KeyRecord) -> None:
        """Add a record; a name already taken is a KeyRequestError (409)."""

    @abstractmethod
    async def replace(self, record: KeyRecord) -> None:
        """Overwrite the record of that name; an unknown name is a KeyRequestError (404)."""

    async def get(self, name: str) -> KeyRecord:
        for record in await self.all():
            if record.name == name:
                return record
        raise KeyRequestError(f"No key named {name!r}.", code="key_not_found", status=404)

    async def aclose(self) -> None:
        return None


def duplicate(name: str) -> KeyRequestError:
    return KeyRequestError(f"A key named {name!r} exists already.", code="key_exists", status=409)


def unknown(name: str) -> KeyRequestError:
    return KeyRequestError(f"No key named {name!r}.", code="key_not_found", status=404)


def _count(data: dict[str, Any], name: str, where: str = "limits") -> int | None:
    value: object = data.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise KeyRequestError(f"{where}.{name} must be a whole number ≥ 0 or null.", code=f"invalid_{where}")
    return value


def key_fields(body: dict[str, Any], *, now: float | None = None) -> dict[str, Any]:
    """The record fields an admin body (or the command line) sets; only those present.
    `expires_in_seconds` is a convenience for `expires_at`."""
    fields: dict[str, Any] = {}
    if "owner" in body:
        owner = body["owner"]
        if owner is not None and (not isinstance(owner, str) or len(owner) > 256):
            raise KeyRequestError("owner must be a string of at most 256 characters.", code="invalid_owner")
        fields["owner"] = owner
    if "models" in body:
        models = body["models"] or []
        if not isinstance(models, list) or not all(isinstance(m, str) and 0 < len(m) <= 256 for m in models):
            raise KeyRequestError("models must be a list of model-id globs.", code="invalid_models")
        fields["models"] = tuple(models)
    if "expires_in_seconds" in body and body["expires_in_seconds"] is not None:
        seconds = body["expires_in_seconds"]
        if isinstance(seconds, bool) or not isinstance(seconds, int | float) or seconds <= 0:
            raise KeyRequestError("expires_in_seconds must be a positive number.", code="invalid_expiry")
        fields["expires_at"] = int((time.time() if now is None else now) + seconds)
    elif "expires_at" in body:
        expires = body["expires_at"]
        if expires is not None and (isinstance(expires, bool) or not isinstance(expires, int)):
            raise KeyRequestError("expires_at must be unix seconds or null.", code="invalid_expiry")
        fields["expires_at"] = expires
    if "limits" in body:
        limits = body["limits"] or {}
        if not isinstance(limits, dict):
            raise KeyRequestError("limits must be an object.", code="invalid_limits")
        fields["limits"] = KeyLimits(
            _count(limits, "rpm"), _count(limits, "tpm"), _count(limits, "concurrent")
        )
    if "budget" in body:
        fields["budget"] = _budget(body["budget"])
    if "metadata" in body:
        metadata = body["metadata"] or {}
        if not isinstance(metadata, dict) or len(str(metadata)) > 16 * 1024:
            raise KeyRequestError("metadata must be an object (at most 16 KiB).", code="invalid_metadata")
        fields["metadata"] = metadata
    return fields


def _budget(value: object) -> KeyBudget | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise KeyRequestError("budget must be an object or null.", code="invalid_budget")
    period = value.get("period", "month")
    if period not in ("day", "month"):
        raise KeyRequestError('budget.period must be "day" or "month".', code="invalid_budget")
    tokens = _count(value, "tokens", "budget")
    cost = value.get("cost")
    if cost is not None and (isinstance(cost, bool) or not isinstance(cost, int | float) or cost < 0):
        raise KeyRequestError("budget.cost must be a number ≥ 0 or null.", code="invalid_budget")
    return KeyBudget(tokens, None if cost is None else float(cost), period)
