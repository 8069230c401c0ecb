"""Typed field access for parsing JSON request bodies, with errors that name the parameter.

Dialect parsers use this so every "wrong type" or "out of range" answer reads the same way and
carries the dotted path of the offending parameter (e.g. `messages[2].content`).
"""

from __future__ import annotations

from typing import Any, NoReturn

from sluicegate.core.errors import invalid

_JSON_TYPE = {
    str: "a string",
    bool: "a boolean",
    int: "an integer",
    float: "a number",
    list: "an array",
    dict: "an object",
    type(None): "null",
}


def json_type(value: Any) -> str:
    return _JSON_TYPE.get(type(value), type(value).__name__)


class Fields:
    """A JSON object being parsed; `path` is its location for error messages."""

    __slots__ = ("obj", "path")

    def __init__(self, obj: Any, path: str = "") -> None:
        if not isinstance(obj, dict):
            where = f"'{path}'" if path else "the request body"
            raise invalid(
                f"Invalid type for {where}: expected an object, but got {json_type(obj)} instead.",
                path or None,
            )
        self.obj: dict[str, Any] = obj
        self.path = path

    def where(self, key: str | int) -> str:
        if isinstance(key, int):
            return f"{self.path}[{key}]"
        return f"{self.path}.{key}" if self.path else key

    def fail(self, key: str, message: str, code: str | None = None) -> NoReturn:
        raise invalid(message, self.where(key), code)

    def has(self, key: str) -> bool:
        return self.obj.get(key) is not None

    def _get(self, key: str, required: bool) -> Any:
        value = self.obj.get(key)
        if value is None and required:
            self.fail(key, f"Missing required parameter: '{self.where(key)}'.", "missing_required_parameter")
        return value

    def _type_error(self, key: str, expected: str, value: Any) -> NoReturn:
        self.fail(
            key,
            f"Invalid type for '{self.where(key)}': expected {expected}, but got {json_type(value)} instead.",
        )

    def string(self, key: str, *, required: bool = False, choices: tuple[str, ...] = ()) -> str | None:
        value = self._get(key, required)
        if value is None:
            return None
        if not isinstance(value, str):
            self._type_error(key, "a string", value)
        if choices and value not in choices:
            allowed = ", ".join(f"'{c}'" for c in choices)
            self.fail(
                key,
                f"Invalid value for '{self.where(key)}': '{value}'. Supported values are: {allowed}.",
            )
        return value

    def boolean(self, key: str) -> bool | None:
        value = self.obj.get(key)
        if value is None:
            return None
        if not isinstance(value, bool):
            self._type_error(key, "a boolean", value)
        return value

    def number(self, key: str, *, low: float | None = None, high: float | None = None) -> float | None:
        value = self.obj.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float):
            self._type_error(key, "a number", value)
        self._range(key, value, low, high)
        return float(value)

    def integer(self, key: str, *, low: int | None = None, high: int | None = None) -> int | None:
        value = self.obj.get(key)
        if value is None:
            return None
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            self._type_error(key, "an integer", value)
        self._range(key, value, low, high)
        return value

    def _range(self, key: str, value: float, low: float | None, high: float | None) -> None:
        if low is not None and value < low:
            self.fail(
                key,
                f"Invalid '{self.where(key)}': expected a value >= {low:g}, but got {value:g} instead.",
            )
        if high is not None and value > high:
            self.fail(
                key,
                f"Invalid '{self.where(key)}': expected a value <= {high:g}, but got {value:g} instead.",
            )

    def array(self, key: str, *, required: bool = False, non_empty: bool = False) -> list[Any] | None:
        value = self._get(key, required)
        if value is None:
            return None
        if not isinstance(value, list):
            self._type_error(key, "an array", value)
        if non_empty and not value:
            self.fail(
                key,
                f"Invalid '{self.where(key)}': empty array. Expected an array with minimum length 1, but got an empty array instead.",
            )
        return value

    def object(self, key: str, *, required: bool = False) -> Fields | None:
        value = self._get(key, required)
        if value is None:
            return None
        if not isinstance(value, dict):
            self._type_error(key, "an object", value)
        return Fields(value, self.where(key))

    def items(self, key: str, values: list[Any]) -> list[Fields]:
        """Each element of an array parameter as `Fields`, erroring on non-objects."""
        base = self.where(key)
        return [Fields(value, f"{base}[{i}]") for i, value in enumerate(values)]
