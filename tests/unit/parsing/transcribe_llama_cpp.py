"""Transcribes the parser cases of llama.cpp's tests/test-chat.cpp into llama_cpp_cases.json.

    python tests/unit/parsing/transcribe_llama_cpp.py VENDOR/llama.cpp/tests/test-chat.cpp

Only cases this script can read exactly are kept: a `peg_tester` block's `tst.test("…")`
with literal input, tools named from the file's own tool table, `reasoning_format`,
`enable_thinking`, `tool_choice`, and an expectation made of the file's named messages,
`simple_assist_msg(…)`, `message_with_tool_calls(…)`, `expect_content/_reasoning/_tool_calls`.
Cases that continue a prefilled message, parse partial output or use a JSON schema are left out.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

_ESC = {"n": "\n", "t": "\t", '"': '"', "\\": "\\", "'": "'", "r": "\r", "0": "\0"}


def literals(src: str, i: int) -> tuple[list[str], int]:
    """The C++ string literals starting at src[i] (skipping whitespace/comments), and the end."""
    out: list[str] = []
    n = len(src)
    while True:
        while i < n and src[i] in " \t\r\n":
            i += 1
        if src.startswith("//", i):
            i = src.index("\n", i)
            continue
        if src.startswith('R"', i):
            j = src.index("(", i)
            delim = src[i + 2 : j]
            end = src.index(")" + delim + '"', j)
            out.append(src[j + 1 : end])
            i = end + len(delim) + 2
        elif src.startswith('"', i):
            j, buf = i + 1, []
            while src[j] != '"':
                if src[j] == "\\":
                    c = src[j + 1]
                    if c == "u":
                        buf.append(chr(int(src[j + 2 : j + 6], 16)))
                        j += 6
                        continue
                    buf.append(_ESC.get(c, c))
                    j += 2
                else:
                    buf.append(src[j])
                    j += 1
            out.append("".join(buf))
            i = j + 1
        else:
            return out, i


def string_args(text: str) -> list[str] | None:
    """A call's arguments when they are all string literals."""
    parts: list[str] = []
    i = 0
    while True:
        lits, j = literals(text, i)
        if not lits:
            return parts if not text[i:].strip() else None
        parts.append("".join(lits))
        rest = text[j:].lstrip()
        if not rest:
            return parts
        if rest[0] != ",":
            return None
        i = len(text) - len(rest) + 1


def balanced(src: str, i: int) -> int:
    """Index just past the parenthesis/brace group that opens at src[i]."""
    depth, j = 0, i
    pairs = {"(": ")", "{": "}"}
    stack: list[str] = []
    while j < len(src):
        c = src[j]
        if src.startswith('R"', j) or c == '"':
            _, j = literals(src, j)
            continue
        if src.startswith("//", j):
            j = src.index("\n", j)
            continue
        if c == "'":
            j = src.index("'", j + 2 if src[j + 1] == "\\" else j + 1) + 1
            continue
        if c in pairs:
            stack.append(pairs[c])
            depth += 1
        elif stack and c == stack[-1]:
            stack.pop()
            if not stack:
                return j + 1
        j += 1
    raise ValueError("unbalanced")


def msg(
    content: str = "", reasoning: str = "", name: str = "", args: str = "", call_id: str = ""
) -> dict[str, Any]:
    calls = [{"name": name, "arguments": args}] if name or call_id else []
    return {"content": content, "reasoning": reasoning, "tool_calls": calls}


def named_messages(src: str) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for m in re.finditer(r"const common_chat_msg (\w+)\s*=\s*simple_assist_msg\(", src):
        end = balanced(src, m.end() - 1)
        args = string_args(src[m.end() : end - 1])
        if args is not None:
            out[m.group(1)] = msg(*args)
    return out


def tool_table(src: str) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for m in re.finditer(r"static common_chat_tool (\w+)\{", src):
        end = balanced(src, m.end() - 1)
        body = re.sub(r"/\*.*?\*/", "", src[m.end() : end - 1])
        args = string_args(body)
        if args and len(args) == 3:
            out[m.group(1)] = {
                "type": "function",
                "function": {"name": args[0], "description": args[1], "parameters": json.loads(args[2])},
            }
    return out


def expectation(call: str, arg: str, names: dict[str, dict[str, Any]], into: dict[str, Any]) -> bool:
    arg = arg.strip()
    if call == "expect":
        if arg in names:
            into.update(json.loads(json.dumps(names[arg])))
            return True
        m = re.match(r"(\w+)\((.*)\)$", arg, re.S)
        if not m:
            return False
        parts = string_args(m.group(2))
        if parts is None:
            return False
        builders = {
            "simple_assist_msg": lambda *a: msg(*a),
            "message_with_tool_calls": lambda n, a: msg("", "", n, a),
            "message_with_tool_calls_and_reasoning": lambda n, a, r: msg("", r, n, a),
            "message_with_content_and_tool_call": lambda c, n, a: msg(c, "", n, a),
            "message_with_reasoning_and_tool_call": lambda r, n, a: msg("", r, n, a),
        }
        if m.group(1) not in builders:
            return False
        into.update(builders[m.group(1)](*parts))
        return True
    if call in ("expect_content", "expect_reasoning"):
        parts = string_args(arg)
        if parts is None or len(parts) != 1:
            return False
        into["content" if call == "expect_content" else "reasoning"] = parts[0]
        return True
    if call == "expect_tool_calls":
        calls = []
        body = arg.strip()
        if not body.startswith("{"):
            return False
        inner, i = body[1 : balanced(body, 0) - 1], 0
        while True:
            while i < len(inner) and inner[i] in " \t\r\n,":
                i += 1
            if i >= len(inner):
                break
            if inner[i] != "{":
                return False
            end = balanced(inner, i)
            entry = re.sub(r",\s*\{\s*\}\s*$", "", inner[i + 1 : end - 1].strip())
            parts = string_args(entry)
            if parts is None or len(parts) < 2:
                return False
            calls.append({"name": parts[0], "arguments": parts[1]})
            i = end
        into["tool_calls"] = calls
        return True
    return False


# The next `.call(` of a test's chain, past whitespace and `// comments` between calls.
_CHAINED = re.compile(r"(?:\s|//[^\n]*)*\.\s*(\w+)\(")


def cases(src: str) -> list[dict[str, Any]]:
    names = named_messages(src)
    tools = tool_table(src)
    out: list[dict[str, Any]] = []
    testers: dict[str, str] = {}
    for m in re.finditer(r'auto (\w+)\s*=\s*peg_tester\("models/templates/([^"]+)"|(\w+)\.test\(', src):
        if m.group(1):
            testers[m.group(1)] = m.group(2)
            continue
        tester = m.group(3)
        line_start = src.rfind("\n", 0, m.start()) + 1
        if tester not in testers or src[line_start : m.start()].lstrip().startswith("//"):
            continue  # not a tester, or commented out
        start = m.end() - 1
        end = balanced(src, start)
        lits, j = literals(src, start + 1)
        if not lits or src[j : end - 1].strip():
            continue
        case: dict[str, Any] = {
            "template": testers[tester],
            "line": src.count("\n", 0, m.start()) + 1,
            "input": "".join(lits),
            "tools": [],
            "reasoning_format": "none",
            "enable_thinking": True,
            "tool_choice": "auto",
        }
        expect: dict[str, Any] = {"content": "", "reasoning": "", "tool_calls": []}
        ok, i = True, end
        while True:
            mm = _CHAINED.match(src, i)
            if not mm:
                break
            call, arg_end = mm.group(1), balanced(src, mm.end() - 1)
            arg = src[mm.end() : arg_end - 1]
            i = arg_end
            if call == "run":
                break
            if call == "reasoning_format":
                case["reasoning_format"] = arg.replace("COMMON_REASONING_FORMAT_", "").lower()
            elif call == "enable_thinking":
                case["enable_thinking"] = arg.strip() == "true"
            elif call == "tool_choice":
                case["tool_choice"] = arg.replace("COMMON_CHAT_TOOL_CHOICE_", "").lower()
            elif call == "tools":
                wanted = [t.strip() for t in arg.strip().strip("{}").split(",") if t.strip()]
                if not all(t in tools for t in wanted):
                    ok = False
                case["tools"] = [tools[t] for t in wanted if t in tools]
            elif call in ("parallel_tool_calls", "expect_reconstruction"):
                pass
            elif call.startswith("expect"):
                ok = ok and expectation(call, arg, names, expect)
            else:  # messages, continuation, partial output, json_schema: not transcribed
                ok = False
        if ok:
            case["expect"] = expect
            out.append(case)
    return out


def main() -> None:
    src = Path(sys.argv[1]).read_text(encoding="utf-8")
    found = cases(src)
    target = Path(__file__).with_name("llama_cpp_cases.json")
    payload = {
        "source": "llama.cpp tests/test-chat.cpp (vendored in llama-cpp-python 0.3.36), transcribed by "
        "tests/unit/parsing/transcribe_llama_cpp.py",
        "cases": found,
    }
    target.write_text(json.dumps(payload, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"{len(found)} cases -> {target}")


if __name__ == "__main__":
    main()
