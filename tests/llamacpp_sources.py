"""llama.cpp's own chat-template corpus and tests, from the llama-cpp-python sdist of the
installed version (it vendors llama.cpp), kept in a cache directory so CI need not commit them.

`llama_cpp_tree()` downloads the sdist once (`pip download --no-binary :all:`) and keeps only
`models/templates/` and `tests/test-chat*.cpp`. The C++ readers below pull out what those tests
state: `test-chat-template.cpp`'s table of templates and expected renderings, and
`test-chat.cpp`'s expected generation prompts.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

CACHE = Path(os.environ.get("SLUICEGATE_TEST_CACHE", Path.home() / ".cache" / "sluicegate-tests"))
_PIP_DOWNLOAD = (sys.executable, "-m", "pip", "download", "--quiet", "--no-binary", ":all:", "--no-deps")
_KEEP = re.compile(r"^[^/]+/vendor/llama\.cpp/(models/templates/[^/]+|tests/test-chat[^/]*\.cpp)$")


class SourcesUnavailable(Exception):
    """The sdist could not be had (no network, no such version)."""


def sdist_files(package: str, keep: re.Pattern[str], into: Path) -> Path:
    """The files of the installed `package`'s sdist whose archive paths `keep` matches, unpacked
    once into `into` (the sdist's top folder renamed); downloaded with `pip download`."""
    if into.is_dir():
        return into
    version = importlib.metadata.version(package)
    CACHE.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=CACHE) as scratch:
        done = subprocess.run(
            [*_PIP_DOWNLOAD, f"{package}=={version}", "-d", scratch],
            capture_output=True,
            text=True,
            timeout=600,
        )
        archives = list(Path(scratch).glob("*.tar.gz"))
        if done.returncode or not archives:
            raise SourcesUnavailable(f"pip download {package}=={version} failed: {done.stderr[-500:]}")
        unpacked = Path(scratch) / "unpacked"
        with tarfile.open(archives[0]) as archive:
            members = [m for m in archive.getmembers() if m.isfile() and keep.match(m.name)]
            archive.extractall(unpacked, members=members, filter="data")
        (top,) = list(unpacked.iterdir())
        try:
            top.rename(into)
        except OSError:  # another run put it there first
            shutil.rmtree(top, ignore_errors=True)
    return into


def llama_cpp_tree() -> Path:
    """The vendored llama.cpp directory (holding models/templates and tests) of the installed
    llama-cpp-python, downloaded into the cache on first use."""
    version = importlib.metadata.version("llama-cpp-python")
    root = sdist_files("llama-cpp-python", _KEEP, CACHE / f"llama-cpp-python-{version}")
    tree = root / "vendor" / "llama.cpp"
    if not (tree / "models" / "templates").is_dir() or not (tree / "tests" / "test-chat.cpp").is_file():
        raise SourcesUnavailable(f"{root} holds no llama.cpp template corpus")
    return tree


# --- reading C++ test tables ----------------------------------------------------------------

_TOKEN = re.compile(
    r'//[^\n]*|/\*.*?\*/|(?:u8)?"(?:[^"\\\n]|\\.)*"|U8C\(|[{}(),]|\btrue\b|\bfalse\b|[^\s{}(),"/]+|/',
    re.S,
)
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", '"': '"', "\\": "\\", "'": "'", "0": "\0"}


def _unescape(literal: str) -> str:
    body = literal[literal.index('"') + 1 : -1]
    return re.sub(r"\\(.)", lambda m: _ESCAPES.get(m.group(1), m.group(1)), body)


def _values(text: str) -> list[object]:
    """C++ brace initialisers as nested lists: adjacent string literals joined, comments dropped."""
    stack: list[list[object]] = [[]]
    last_string = False
    for match in _TOKEN.finditer(text):
        token = match.group(0)
        if token.startswith(("//", "/*")) or token in (",", "U8C(", ")", "("):
            if token == ",":
                last_string = False
            continue
        if token == "{":
            stack.append([])
        elif token == "}":
            done = stack.pop()
            stack[-1].append(done)
        elif token.endswith('"'):
            if last_string:
                stack[-1][-1] = str(stack[-1][-1]) + _unescape(token)
            else:
                stack[-1].append(_unescape(token))
            last_string = True
            continue
        elif token in ("true", "false"):
            stack[-1].append(token == "true")
        last_string = False
    return stack[0]


@dataclass
class TemplateCase:
    """One row of test-chat-template.cpp's `test_cases`."""

    name: str
    template: str
    expected: str  # what llama.cpp's built-in (non-Jinja) formatter renders
    expected_jinja: str  # what the Jinja path renders
    bos_token: str = ""
    eos_token: str = ""
    supported_with_jinja: bool = True
    extra: list[tuple[str, str]] = field(default_factory=list)


def template_cases(tree: Path) -> tuple[list[tuple[str, str]], list[TemplateCase]]:
    """test-chat-template.cpp's conversation and its table of templates."""
    text = (tree / "tests" / "test-chat-template.cpp").read_text(encoding="utf-8")
    body = text[text.index("int main_automated_tests(void)") :]
    conversation_src = body[body.index("conversation {") : body.index("};") + 1]
    (conversation,) = _values(conversation_src[conversation_src.index("{") :])
    assert isinstance(conversation, list)
    start = body.index("std::vector<TestCase> test_cases {")
    table = body[start + len("std::vector<TestCase> test_cases ") : body.index("\n    };", start) + 6]
    (rows,) = _values(table)
    cases = []
    for row in rows:  # type: ignore[union-attr]
        name, template, expected, expected_jinja, *rest = row
        case = TemplateCase(name, template, expected, expected_jinja or expected)
        if rest:
            case.bos_token, case.eos_token, *rest = rest
        if rest:
            case.supported_with_jinja, *rest = rest
        if rest:
            case.extra = [(role, content) for role, content in rest[0]]
        cases.append(case)
    return [(role, content) for role, content in conversation], cases  # type: ignore[misc]


def generation_prompts(tree: Path) -> list[tuple[str, str]]:
    """test-chat.cpp's `check(tmpls, basic(), "…")`: a template file and the generation prompt a
    system + user conversation must end with."""
    text = (tree / "tests" / "test-chat.cpp").read_text(encoding="utf-8")
    body = text[text.index("static void test_template_generation_prompt()") :]
    body = body[: body.index("\n}\n")]
    found = []
    current: list[str] = []
    pattern = (
        r'for \(const char \* tmpl : \{([^}]*)\}\)|read_templates\(("[^"]+"|\w+)\)'
        r'|check\(tmpls, basic\(\),\s*((?:"(?:[^"\\]|\\.)*"\s*)+)\)'
    )
    for match in re.finditer(pattern, body):
        if match.group(1):  # a loop over several templates
            current = [_unescape(lit) for lit in re.findall(r'"[^"]*"', match.group(1))]
        elif match.group(2):
            if match.group(2).startswith('"'):
                current = [_unescape(match.group(2))]
        elif current:
            literals = re.findall(r'"(?:[^"\\]|\\.)*"', match.group(3))
            expected = "".join(_unescape(lit) for lit in literals)
            found.extend((Path(path).name, expected) for path in current)
    return found


def message_user(tree: Path) -> str:
    text = (tree / "tests" / "test-chat.cpp").read_text(encoding="utf-8")
    found = re.search(r'const common_chat_msg message_user\{\s*"user",\s*"((?:[^"\\]|\\.)*)"', text)
    assert found, "test-chat.cpp no longer defines message_user"
    return _unescape(f'"{found.group(1)}"')
