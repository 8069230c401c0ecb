"""Typed field access for parsing JSON request bodies, with errors that name the parameter.

Dialect parsers use this so every "wrong type" or "out of range" answer reads the same way and
carries the dotted path of the offending parameter (e.g. `messages[2].content`).
"""

from __future__ import annotations

import math
import re
from typing import Any, NoReturn

from sluicegate.core.errors import invalid
from sluicegate.core.request import SamplingParams

# What engines and the wire carry: token counts and llama.cpp's integers are int32, seeds and
# everything else at most int64 (orjson cannot encode an int of 2**64 or more).
INT32_MAX = 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
# No sampling or timing parameter means anything near float's range; refusing values past
# 2**53 (where floats stop counting whole numbers) keeps 1e308 and friends out of engines.
FLOAT_LIMIT = float(2**53)
MAX_REPEAT_PENALTY = 100.0  # llama.cpp takes any float; past this, no token is ever repeated

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
        """A finite number within [low, high] (by default within +-2**53)."""
        value = self.obj.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float):
            self._type_error(key, "a number", value)
        if isinstance(value, float) and not math.isfinite(value):
            self.fail(key, f"Invalid '{self.where(key)}': expected a finite number.")
        self._range(key, value, -FLOAT_LIMIT if low is None else low, FLOAT_LIMIT if high is None else high)
        return float(value)

    def integer(self, key: str, *, low: int | None = None, high: int | None = None) -> int | None:
        """An integer within [low, high] (by default within int64: what the wire carries)."""
        value = self.obj.get(key)
        if value is None:
            return None
        if isinstance(value, float) and value.is_integer():
            if abs(value) > FLOAT_LIMIT:  # 1e19, or a literal past int64 the parser rounded to a float
                self.fail(
                    key,
                    f"Invalid '{self.where(key)}': {_show(value)} is out of range "
                    "(expected a signed 64-bit integer, written as an integer).",
                )
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            self._type_error(key, "an integer", value)
        self._range(key, value, INT64_MIN if low is None else low, INT64_MAX if high is None else high)
        return value

    def _range(self, key: str, value: int | float, low: int | float, high: int | float) -> None:
        # (`int | float`, not `float`: compiled, a `float` parameter turns an int into a C double,
        # and 2**63 would compare equal to int64's largest)
        if value < low:
            self.fail(
                key,
                f"Invalid '{self.where(key)}': expected a value >= {_show(low)}, but got {_show(value)} instead.",
            )
        if value > high:
            self.fail(
                key,
                f"Invalid '{self.where(key)}': expected a value <= {_show(high)}, but got {_show(value)} instead.",
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

    def stop(self, key: str = "stop", *, most: int = 4) -> list[str]:
        """OpenAI's `stop`: a string or an array of at most `most` strings."""
        value = self.obj.get(key)
        if value is None:
            return []
        if isinstance(value, str):
            return [value]
        if not isinstance(value, list):
            self.fail(key, f"Invalid type for '{self.where(key)}': expected a string or an array of strings.")
        if len(value) > most or not all(isinstance(x, str) for x in value):
            self.fail(
                key, f"Invalid '{self.where(key)}': expected a string or an array of at most {most} strings."
            )
        return list(value)

    def items(self, key: str, values: list[Any]) -> list[Fields]:
        """Each element of an array parameter as `Fields`, erroring on non-objects."""
        base = self.where(key)
        return [Fields(value, f"{base}[{i}]") for i, value in enumerate(values)]


def _show(value: int | float) -> str:
    """A bound or a value for a message: whole numbers in full (`2147483647`, not `2.14748e+09`),
    huge ones shortened (a client's 5,000-digit integer is not echoed back)."""
    if isinstance(value, int) or value.is_integer():
        whole = int(value)
        return str(whole) if abs(whole) < 10**24 else f"a number of {whole.bit_length()} bits"
    return f"{value:g}"


_ASCII_INT = re.compile(r"-?[0-9]{1,19}")


def query_int(text: str, param: str, *, low: int, high: int) -> int:
    """An integer from client text (query string, header): ASCII digits only, within [low, high].

    Never `str.isdigit()` or bare `int()`: `"²".isdigit()` is true and `int("²")` fails, while
    `int("٣")`, `int(" 3 ")` and `int("1_0")` succeed; none of them is a number a client means.
    """
    if not _ASCII_INT.fullmatch(text) or not low <= int(text) <= high:
        raise invalid(
            f"Invalid '{param}': expected an integer between {low} and {high}, got {text[:40]!r}.", param
        )
    return int(text)


def stream_fields(f: Fields) -> tuple[bool, bool]:
    """OpenAI's `stream`, and `stream_options` (only with `stream`): whether to stream, and
    whether the stream ends with a usage chunk (`include_usage`). `include_obfuscation` is read
    as a boolean and not acted on."""
    stream = bool(f.boolean("stream"))
    options = f.object("stream_options")
    if options is None:
        return stream, False
    if not stream:
        f.fail("stream_options", "The 'stream_options' parameter is only allowed when 'stream' is enabled.")
    options.boolean("include_obfuscation")
    return stream, bool(options.boolean("include_usage"))


# Every parameter `sampling_fields` (and `_llama_samplers`) reads, each under its field's name:
# a body with none of them gets the defaults without a lookup each (a test reads the functions'
# source and fails when one reads a key missing here).
SAMPLING_KEYS = frozenset(
    (
        "temperature", "top_p", "top_k", "min_p", "typical_p", "repeat_penalty", "repeat_last_n",
        "presence_penalty", "frequency_penalty", "seed", "ignore_eos", "dry_multiplier", "dry_base",
        "dry_allowed_length", "dry_penalty_last_n", "dry_sequence_breakers", "xtc_probability",
        "xtc_threshold", "top_n_sigma", "mirostat", "mirostat_tau", "mirostat_eta",
    )
)  # fmt: skip


def sampling_fields(f: Fields) -> SamplingParams:
    """The sampling parameters dialects name alike (OpenAI's, and the local servers' extensions
    `top_k`, `min_p`, `repeat_penalty`), within the ranges every engine accepts."""
    s = SamplingParams()
    if SAMPLING_KEYS.isdisjoint(f.obj):  # most bodies name none: 25 lookups for their defaults
        return s
    s.temperature = f.number("temperature", low=0, high=2)
    s.top_p = f.number("top_p", low=0, high=1)
    s.top_k = f.integer("top_k", low=-1, high=INT32_MAX)
    s.min_p = f.number("min_p", low=0, high=1)
    s.typical_p = f.number("typical_p", low=0, high=1)
    s.repeat_penalty = f.number("repeat_penalty", low=0, high=MAX_REPEAT_PENALTY)
    s.repeat_last_n = f.integer("repeat_last_n", low=-1, high=INT32_MAX)
    s.presence_penalty = f.number("presence_penalty", low=-2, high=2)
    s.frequency_penalty = f.number("frequency_penalty", low=-2, high=2)
    s.seed = f.integer("seed")
    _llama_samplers(f, s)
    return s


MAX_DRY_BREAKERS = 64  # llama.cpp's DRY sampler looks each one up in the vocabulary


def _llama_samplers(f: Fields, s: SamplingParams) -> None:
    """llama.cpp's further samplers, by llama-server's names (Ollama's options share the
    mirostat ones): DRY, XTC, top-n-sigma and mirostat; and `ignore_eos`, which llama-server
    takes on every generating endpoint, its Chat Completions among them."""
    s.ignore_eos = bool(f.boolean("ignore_eos"))
    s.dry_multiplier = f.number("dry_multiplier", low=0, high=MAX_REPEAT_PENALTY)
    s.dry_base = f.number("dry_base", low=0, high=MAX_REPEAT_PENALTY)
    s.dry_allowed_length = f.integer("dry_allowed_length", low=0, high=INT32_MAX)
    s.dry_penalty_last_n = f.integer("dry_penalty_last_n", low=-1, high=INT32_MAX)
    breakers = f.array("dry_sequence_breakers")
    if breakers is not None:
        if (
            not breakers
            or len(breakers) > MAX_DRY_BREAKERS
            or not all(isinstance(b, str) and b for b in breakers)
        ):
            f.fail(
                "dry_sequence_breakers",
                f"'dry_sequence_breakers' must be a non-empty array of at most {MAX_DRY_BREAKERS} "
                "non-empty strings.",
            )
        s.dry_sequence_breakers = list(breakers)
    s.xtc_probability = f.number("xtc_probability", low=0, high=1)
    s.xtc_threshold = f.number("xtc_threshold", low=0, high=1)
    s.top_n_sigma = f.number("top_n_sigma", low=-1, high=MAX_REPEAT_PENALTY)
    s.mirostat = f.integer("mirostat", low=0, high=2) or 0
    s.mirostat_tau = f.number("mirostat_tau", low=0, high=MAX_REPEAT_PENALTY)
    s.mirostat_eta = f.number("mirostat_eta", low=0, high=1)


MAX_LOGIT_BIAS = 1024  # entries in one `logit_bias`
BIAS_LIMIT = 100.0  # OpenAI's range: -100 bans a token, 100 all but forces it


def logit_bias(f: Fields, key: str = "logit_bias") -> tuple[dict[int, float], dict[str, float]]:
    """OpenAI's `{"<token id>": bias}` (-100..100), or llama-server's `[[id, bias]]` where a
    bias of `false` bans the token (-inf). Returns the biases by token id, and those keyed by
    text (llama-server's `{"text": bias}` and `[["text", bias]]`): the engine tokenizes those,
    the tokenizer being its own, and biases every token of the text."""
    value = f.obj.get(key)
    if value is None:
        return {}, {}
    if isinstance(value, dict):
        pairs: list[Any] = list(value.items())
    elif isinstance(value, list) and all(isinstance(p, list) and len(p) == 2 for p in value):
        pairs = value
    else:
        f.fail(key, f"Invalid '{key}': expected an object mapping token ids to biases.")
    if len(pairs) > MAX_LOGIT_BIAS:
        f.fail(key, f"Invalid '{key}': at most {MAX_LOGIT_BIAS} tokens.")
    biases: dict[int, float] = {}
    texts: dict[str, float] = {}
    for token, bias in pairs:
        if bias is False:
            value = -math.inf
        elif (
            isinstance(bias, int | float) and not isinstance(bias, bool) and -BIAS_LIMIT <= bias <= BIAS_LIMIT
        ):
            value = float(bias)
        else:
            f.fail(
                key, f"Invalid '{key}': the bias of {token!r} must be a number from -100 to 100, or false."
            )
        if isinstance(token, str) and token.isascii() and token.isdigit():
            token = int(token)
        if isinstance(token, str) and token:
            texts[token] = value
        elif isinstance(token, int) and not isinstance(token, bool) and 0 <= token <= INT32_MAX:
            biases[token] = value
        else:
            f.fail(key, f"Invalid '{key}': {token!r} is neither a token id nor a text.")
    return biases, texts
