"""The Jinja environment llama.cpp gives chat templates (its `common/jinja` engine), in Jinja2.

llama.cpp's engine is Jinja2 as Hugging Face configures it (trim_blocks, lstrip_blocks, a
sandbox, `raise_exception`, `strftime_now`, loop controls), plus the leniencies real templates
lean on, which this module reproduces:

- an undefined value chains (`message.tool_calls.x` is undefined, not an error), iterates as
  nothing and prints as nothing;
- `+` and `~` with a string on one side concatenate, and treat none/undefined as "";
- `tojson` writes `", "`/`": "` separators (`","` with an indent), keeps non-ASCII text and key
  order, and prints floats as C++ streams them (six significant digits);
- list `append`/`pop` and dict `update` work (templates build lists), as does `{% generation %}`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from functools import lru_cache
from typing import Any, NoReturn

import jinja2
import jinja2.nodes
from jinja2.compiler import CodeGenerator, Frame
from jinja2.ext import Extension
from jinja2.parser import Parser
from jinja2.runtime import Undefined
from jinja2.sandbox import SandboxedEnvironment


class TemplateRaised(jinja2.TemplateError):
    """The template called `raise_exception`: it refuses the conversation as given."""


class LenientUndefined(jinja2.ChainableUndefined):
    """llama.cpp's undefined: attribute and item access chain, and it is "" beside a string."""

    __slots__ = ()

    def __add__(self, other: Any) -> Any:
        return other if isinstance(other, str) else super().__add__(other)

    def __radd__(self, other: Any) -> Any:
        return other if isinstance(other, str) else super().__radd__(other)

    def __iter__(self) -> Iterator[Any]:
        return iter(())


def raise_exception(message: str = "") -> NoReturn:
    raise TemplateRaised(str(message))


def strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _json_string(text: str, ensure_ascii: bool) -> str:
    out = []
    for char in text:
        escaped = _ESCAPES.get(char)
        if escaped is not None:
            out.append(escaped)
        elif char < " ":
            out.append(f"\\u{ord(char):04x}")
        elif ensure_ascii and char > "\x7f":
            out.append(json.dumps(char))  # \\uXXXX, surrogate pairs above the BMP
            out[-1] = out[-1][1:-1]
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


def _json_number(value: float) -> str:
    # `std::ostream << double`: six significant digits, as llama.cpp's tojson writes floats.
    if math.isnan(value) or math.isinf(value):
        return "null"
    return f"{value:g}"


def _to_json(value: Any, level: int, indent: int | None, items: str, keys: str, ascii_: bool) -> str:
    """value.cpp's value_to_json_internal, line for line."""
    if value is None or isinstance(value, Undefined):
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _json_number(value)
    if isinstance(value, str):
        return _json_string(value, ascii_)
    if isinstance(value, Mapping):
        pairs = [(_json_string(str(k), ascii_), v) for k, v in value.items()]
        return _container(
            "{",
            "}",
            [k + keys + _to_json(v, level + 1, indent, items, keys, ascii_) for k, v in pairs],
            level,
            indent,
            items,
        )
    if isinstance(value, Iterable):  # lists, tuples, and what `map`/`select` yield
        return _container(
            "[",
            "]",
            [_to_json(v, level + 1, indent, items, keys, ascii_) for v in value],
            level,
            indent,
            items,
        )
    return "null"


def _container(open_: str, close: str, parts: list[str], level: int, indent: int | None, items: str) -> str:
    if not parts:
        return open_ + close
    if indent is None or indent < 0:
        return open_ + items.join(parts) + close
    pad = " " * (indent * (level + 1))
    return open_ + "\n" + (items + "\n").join(pad + p for p in parts) + "\n" + " " * (indent * level) + close


def tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: Sequence[str] | None = None,
    sort_keys: bool = False,
) -> str:
    """llama.cpp's `tojson` (value.cpp): `", "` between items unless indented, then `","`."""
    items = separators[0] if separators else ("," if indent is not None else ", ")
    keys = separators[1] if separators and len(separators) > 1 else ": "
    if sort_keys:
        value = json.loads(json.dumps(value, sort_keys=True, default=str))
    return _to_json(value, 0, indent, items, keys, ensure_ascii)


def _concat_piece(value: Any) -> str:
    if value is None or isinstance(value, Undefined):
        return ""
    return _display(value)


def _display(value: Any) -> str:
    """How llama.cpp prints a value: like Python, floats without trailing zeros."""
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, float):
        text = f"{value:f}".rstrip("0")
        return text + "0" if text.endswith(".") else text
    return str(value)


def concat(pieces: Iterable[Any]) -> str:
    """The `~` operator: strings joined, none and undefined as ""."""
    return "".join(_concat_piece(piece) for piece in pieces)


class _Generator(CodeGenerator):
    """Compiles `a ~ b` to llama.cpp's concatenation (none and undefined count as "")."""

    def visit_Concat(self, node: jinja2.nodes.Concat, frame: Frame) -> None:
        self.write("environment.llama_concat((")
        for arg in node.nodes:
            self.visit(arg, frame)
            self.write(", ")
        self.write("))")


class GenerationExtension(Extension):
    """`{% generation %}…{% endgeneration %}` (HF's assistant-mask marker) renders its body."""

    tags = {"generation"}

    def parse(self, parser: Parser) -> jinja2.nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.Scope(body, lineno=lineno)


class LlamaEnvironment(SandboxedEnvironment):
    code_generator_class = _Generator
    intercepted_binops = frozenset({"+"})

    def __init__(self) -> None:
        super().__init__(
            trim_blocks=True,
            lstrip_blocks=True,
            keep_trailing_newline=False,
            undefined=LenientUndefined,
            extensions=["jinja2.ext.loopcontrols", GenerationExtension],
            finalize=self._finalize,
        )
        self.filters["tojson"] = tojson
        self.filters["string"] = _display
        self.globals["raise_exception"] = raise_exception
        self.globals["strftime_now"] = strftime_now
        self.llama_concat = concat

    @staticmethod
    def _finalize(value: Any) -> Any:
        if value is None:
            return "None"
        if isinstance(value, bool | float):
            return _display(value)
        return value

    def call_binop(self, context: jinja2.runtime.Context, operator: str, left: Any, right: Any) -> Any:
        if operator == "+" and (isinstance(left, str) or isinstance(right, str)):
            return _concat_piece(left) + _concat_piece(right)
        return super().call_binop(context, operator, left, right)


@lru_cache(maxsize=1)
def environment() -> LlamaEnvironment:
    return LlamaEnvironment()


@lru_cache(maxsize=64)
def compile_template(source: str) -> jinja2.Template:
    return environment().from_string(source)
