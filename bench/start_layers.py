"""A request start's instructions by layer: `bench/instructions.py`'s start load (one-token
Chat Completions streams, c = 16 by default) counted by callgrind in a Sluicegate whose layers
are marked, so that the rows are measured and sum to the whole.

    python bench/start_layers.py [--requests 100] [--concurrency 16] [--keep DIR] [--marks-dir DIR]
        [--plain] [--double] [--no-gc]
    python bench/start_layers.py --report DIR/marked.callgrind [--report-plain DIR/plain.callgrind]
        [--report-double DIR/double.callgrind]                      # the table again from dumps

callgrind sees no Python function (CPython 3.11 has no perf trampoline; interpreted calls run
inside one eval loop). So each layer is wrapped, in the server process only, in a *mark*: a
function written by `marks_source()` (one per row of `TREE`, from one template per kind) and
compiled by mypyc into a scratch folder (`--marks-dir`, built once, ~20 s), that awaits the layer's awaitable (or calls its function). Every step of the
layer runs inside its mark's C function, and callgrind's inclusive count of that function is the
layer's whole cost over all its steps. A layer's own row is its mark's count less the marks
inside it; the outermost row is the whole start less the app's mark (uvicorn, the event loop,
the upstream connection's read callbacks). The marks are installed by this script run as the
server's launcher (`--hook`), as monkeypatches of the running code; src/ is not changed.

A mark costs instructions itself (a coroutine and a step's forwarding, or a call): each mark's
own (self) count is printed, and their sum is the figure the marked whole is above the plain one
(`--plain` also counts an unmarked server: the difference is the marks' cost, the residue).
`--double` also counts a server with one mark more at each layer: each row's own count grows by
what one mark costs there, printed with the row less it. `--no-gc`: the servers run without
collections, so that no collection lands in one row of one run and not the other's.

Compiled functions are C symbols already (mypyc's `CPyDef_`/`CPyPy_`): the rows "of which"
give the inclusive counts of a few (the largest match of each name, per start), inside the
layer that calls them. The collector (`gc_collect_main`) lands in whichever layer allocates
when a collection is due: its total is printed as an "of which" of the whole.
"""

from __future__ import annotations

import argparse
import functools
import gc
import importlib
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DOUBLE = "START_LAYERS_DOUBLE"  # the server's environment: each mark twice
NO_GC = "START_LAYERS_NO_GC"  # the server's environment: no collections

# The marks, each as (layer path, the layer it lies inside); the tree the table is printed as.
TREE: list[tuple[str, str, str]] = [
    # (mark, parent, row name)
    ("app", "", "the app: everything below uvicorn's `app(scope, receive, send)` call"),
    ("endpoint", "app", "the turn endpoint (`TurnEndpoint.__call__`)"),
    ("read_json", "endpoint", "the body read and JSON parse (`read_json_body`)"),
    ("prepare", "endpoint", "the runner's `prepare`"),
    ("parse", "prepare", "the dialect's parse and validation (`ChatCompletionsDialect.parse`)"),
    ("resolve", "prepare", "model resolve (`Registry.resolve`)"),
    ("admission", "prepare", "admission (`Admission.take`)"),
    ("open_model", "prepare", "the model's generation opened (`Model.open`)"),
    ("answer", "prepare", "the upstream engine (P1) and the answer wait (`_engine_answer`)"),
    ("turn_id", "prepare", "the turn's id (`new_id`)"),
    ("encoder", "prepare", "the dialect's encoder made (`dialect.encoder`)"),
    ("headers", "prepare", "the response headers checked (`safe_headers`)"),
    # A plain stream (this load's) runs in the endpoint itself, not in `_run` (round sixteen):
    # `_run` counts 0 here and the stream is the endpoint's.
    ("run", "endpoint", "the runner's `_run` (not a plain stream's)"),
    ("stream", "endpoint", "the stream (P2 and the end: `stream_chunks`)"),
    ("cycle_send", "stream", "uvicorn's `send` (Sluicegate's `Cycle.send`: the head, the last body)"),
    ("release", "endpoint", "the request's release (`Owned.aclose`)"),
]

# The marks whose layer is a function (called: `mark_x(f, *args)`); the others are awaitables.
SYNC_MARKS = frozenset({"parse", "resolve", "admission", "open_model", "turn_id", "encoder", "headers"})
# Each mark must be a function of its own, so that callgrind names it: written out from TREE's
# names, one template per kind, plus the two calibration marks (`--double`). A measuring aid,
# compiled in the scratch folder only; not part of the server.
MARK_ASYNC = """

async def mark_{name}(aw: Any) -> Any:
    return await aw
"""
MARK_SYNC = """

def mark_{name}(f: Any, *args: Any) -> Any:
    return f(*args)
"""


def marks_source() -> str:
    """The marks module `build_marks` compiles: `mark_<row>` for each row of TREE, and
    `mark_nothing` / `mark_nothing_async` (a mark around nothing: its own cost)."""
    rows = [(name, MARK_SYNC if name in SYNC_MARKS else MARK_ASYNC) for name, _, _ in TREE]
    rows += [("nothing", MARK_SYNC), ("nothing_async", MARK_ASYNC)]
    head = '"""Layer marks for bench/start_layers.py (written by its marks_source())."""\n\n'
    head += "from __future__ import annotations\n\nfrom typing import Any\n"
    return head + "".join(template.format(name=name) for name, template in rows)


# Compiled functions shown as "of which" rows under the mark that calls them (a symbol pattern:
# mypyc names a coroutine's steps `..._gen_____mypyc_generator_helper__`, a function `CPyDef_...`).
HELPER = "_gen_____mypyc_generator_helper__$"
COMPILED: list[tuple[str, str, str]] = [
    (
        "outside",
        r"CPyDef_http____Connection___data_received$",
        "the upstream connection's reads (`data_received`)",
    ),
    ("app", r"ObserveMiddleware" + HELPER, "`ObserveMiddleware.__call__` (compiled; all below it)"),
    # (`chat_completions___request___…` once another module named `request` is compiled with it)
    ("parse", r"CPyDef_(chat_completions___)?request___parse_chat_request$", "`parse_chat_request`"),
    ("answer", r"CPyDef_answer_first___await_answer" + HELPER, "`await_answer` (the wait's coroutine)"),
    ("answer", r"CPyDef_relay___Relay____start$", "`Relay._start` (body, route/decoder, clocks)"),
    (
        "answer",
        r"CPyDef_engine___OpenAIUpstreamEngine___request_body$",
        "— the upstream body (`request_body`)",
    ),
    ("answer", r"_send_Relay" + HELPER, "`Relay._send` (replica, pool, connection, write)"),
    ("answer", r"_exchange_HttpPool" + HELPER, "— `HttpPool._exchange`"),
    ("answer", r"CPyDef_http____Connection___start$", "— `_Connection.start`"),
    ("stream", r"_run__Stream" + HELPER, "`_Stream.run` (all of P2 and the end)"),
    ("stream", r"_anext___3_Frames" + HELPER, "the turn's frames (`Frames.__anext__`: reads, core)"),
    (
        "stream",
        r"CPyDef_segmenter___next_Reads" + HELPER,
        "— the reads (`Reads.next`: the relay's reads, decode, segmenter)",
    ),
    ("", r"_anext___3_Relay" + HELPER, "`Relay.__anext__`, P1 and P2 (start, send, reads)"),
    ("stream", r"CPyDef_wire___SSEReader___feed$", "— the SSE reader (`SSEReader.feed`)"),
    ("stream", r"CPyDef_wire___ChunkDecoder___frame$", "— `ChunkDecoder.frame` (the reads' decode)"),
    (
        "stream",
        r"CPyDef_stream_core___StreamCore___push$",
        "`StreamCore.push` (segmenter, tap, accumulator, encoder)",
    ),
    (
        "stream",
        r"CPyDef_stream_core___StreamCore____encode$",
        "— `StreamCore._encode` (tap, accumulator, encoder; push and finish)",
    ),
    (
        "stream",
        r"CPyDef_chat_completions___encoder___ChatCompletionsEncoder___encode$",
        "— — the encoder (`ChatCompletionsEncoder.encode`)",
    ),
    ("stream", r"CPyDef_accumulate___Accumulator___feed$", "— — the accumulator (`Accumulator.feed`)"),
    ("stream", r"CPyDef_stream_core___StreamCore___finish$", "`StreamCore.finish`"),
    ("stream", r"AnswerSend" + HELPER, "the head through `AnswerSend`, `send_observed`, `Cycle.send`"),
    ("stream", r"CPyDef_response_head___head_block$", "`head_block`"),
    ("stream", r"RequestObserver___end$", "`RequestObserver.end` (metrics, record)"),
    # (a coroutine before round sixteen; a plain method since)
    (
        "stream",
        r"(_over_Relay" + HELPER + r"|CPyDef_relay___Relay____over$)",
        "`Relay._over` (the stream's release)",
    ),
    ("", r"CPyDef_ids___new_id$", "`new_id`, all calls"),
    ("", r"^gc_collect_main$", "the collector (`gc_collect_main`), anywhere"),
]


# --- the server side: marks installed as monkeypatches, then `sluicegate` run as the CLI ---


def _install(marks_dir: str) -> None:
    sys.path.insert(0, marks_dir)
    double = os.environ.get(DOUBLE) == "1"
    import uvicorn.protocols.http.httptools_impl  # noqa: F401  # http_protocol's base, first

    from sluicegate.app import factory, http_protocol
    from sluicegate.core import owned
    from sluicegate.dialects.chat_completions import dialect
    from sluicegate.engines import models, registry
    from sluicegate.turn import runner, state

    m = importlib.import_module("start_layers_marks")  # `marks_source()`, built by mypyc in marks_dir

    def wrap_async(owner: Any, name: str, mark: Any) -> None:
        original = getattr(owner, name, None)
        if original is None:  # the code moved on: that row reads 0 (printed in the server's log)
            print(f"start_layers: no {owner.__name__}.{name} to mark", file=sys.stderr)
            return

        @functools.wraps(original)
        def marked(*args: Any, **kwargs: Any) -> Any:
            return mark(original(*args, **kwargs))

        if hasattr(original, "_is_coroutine"):  # `asgi3`'s marker: uvicorn reads it
            marked._is_coroutine = original._is_coroutine  # type: ignore[attr-defined]
        setattr(owner, name, marked)

    def wrap_sync(owner: Any, name: str, mark: Any) -> None:
        original = getattr(owner, name, None)
        if original is None:
            print(f"start_layers: no {owner.__name__}.{name} to mark", file=sys.stderr)
            return

        @functools.wraps(original)
        def marked(*args: Any) -> Any:
            return mark(original, *args)

        setattr(owner, name, marked)

    if double:
        # `--double`: one marking more at each layer (its wrapper's frame and a mark, another
        # symbol than the row's: callgrind_annotate counts a recursion twice), inside the
        # row's own marking; each row then grows by what marking a layer costs there.
        plain_async, plain_sync = wrap_async, wrap_sync

        def wrap_async(owner: Any, name: str, mark: Any) -> None:
            plain_async(owner, name, m.mark_nothing_async)
            plain_async(owner, name, mark)

        def wrap_sync(owner: Any, name: str, mark: Any) -> None:
            plain_sync(owner, name, m.mark_nothing)
            plain_sync(owner, name, mark)

    wrap_async(factory.SluicegateApp, "__call__", m.mark_app)
    wrap_async(runner.TurnEndpoint, "__call__", m.mark_endpoint)
    wrap_async(runner, "read_json_body", m.mark_read_json)
    wrap_async(runner.TurnEndpoint, "prepare", m.mark_prepare)
    wrap_sync(dialect.ChatCompletionsDialect, "parse", m.mark_parse)
    wrap_sync(registry.Registry, "resolve", m.mark_resolve)
    wrap_sync(state.Admission, "take", m.mark_admission)
    # The runner opens a plain turn's generation with `Model.open` (`open_model` only with tools
    # or heavy checks, and it reaches `Model.open` too, through `Model.admit`).
    wrap_sync(models.Model, "open", m.mark_open_model)
    wrap_async(runner, "_engine_answer", m.mark_answer)
    wrap_sync(runner, "new_id", m.mark_turn_id)
    wrap_sync(dialect.ChatCompletionsDialect, "encoder", m.mark_encoder)
    wrap_sync(runner, "safe_headers", m.mark_headers)
    wrap_async(runner.TurnEndpoint, "_run", m.mark_run)
    wrap_async(runner, "stream_chunks", m.mark_stream)
    wrap_async(owned.Owned, "aclose", m.mark_release)
    wrap_async(http_protocol.Cycle, "send", m.mark_cycle_send)


def serve_marked(marks_dir: str, argv: list[str]) -> None:
    import runpy

    if os.environ.get(NO_GC) == "1":
        # No collections (`--no-gc`): for the runs that size the marks' cost row by row, which a
        # collection landing in one row (5-15 k) would blur. Nothing in the server enables it
        # again (serving.py collects and freezes once at startup, and sets a threshold).
        gc.disable()
    if marks_dir != "-":
        _install(marks_dir)
    sys.argv = ["sluicegate", *argv]
    runpy.run_module("sluicegate", run_name="__main__", alter_sys=True)


# --- the driver ---


def build_marks(folder: Path) -> None:
    source = marks_source().encode()
    copy = folder / "start_layers_marks.py"
    if any(folder.glob("start_layers_marks*.so")) and copy.exists() and copy.read_bytes() == source:
        return  # built from these marks already (a changed marks file is built again)
    folder.mkdir(parents=True, exist_ok=True)
    copy.write_bytes(source)
    subprocess.run([sys.executable, "-m", "mypyc", "start_layers_marks.py"], cwd=folder, check=True)


def annotate(dump: Path, inclusive: bool) -> dict[str, int]:
    """Each function's count in the dump (inclusive or self), by symbol."""
    out = subprocess.run(
        [
            "callgrind_annotate",
            f"--inclusive={'yes' if inclusive else 'no'}",
            "--threshold=100",
            "--auto=no",
            str(dump),
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    counts: dict[str, int] = {}
    for line in out.splitlines():
        found = re.match(r"^\s*([\d,]+)\s+(?:\([\s\d.]+%\)\s+)?(\S.*?)(?:\s+\[.*\])?$", line)
        if not found or ":" not in found.group(2):
            continue
        symbol = found.group(2).split(":", 1)[1]
        counts[symbol] = max(counts.get(symbol, 0), int(found.group(1).replace(",", "")))
    return counts


def total(dump: Path) -> int:
    lines = dump.read_text(errors="replace").splitlines()
    for prefix in ("totals:", "summary:"):  # with --instr-atstart=no, `summary:` can wrap around
        for line in lines:
            if line.startswith(prefix):
                return int(line.split()[1])
    raise RuntimeError(f"no totals in {dump}")


def mark_count(counts: dict[str, int], mark: str) -> int:
    """A mark's inclusive count: its largest symbol (an async mark's `send` wrapper holds the
    generator helper, which holds every step of the layer)."""
    pattern = re.compile(rf"(?:^|_)mark_{mark}(?:_|$)")
    return max((n for s, n in counts.items() if pattern.search(s)), default=0)


def rows(dump: Path) -> tuple[int, dict[str, int], dict[str, int]]:
    """The dump's whole, each mark's inclusive count and each row's own (`outside`: the whole
    less the app's mark)."""
    inclusive = annotate(dump, True)
    whole = total(dump)
    counts = {mark: mark_count(inclusive, mark) for mark, _, _ in TREE}
    children: dict[str, int] = {}
    for mark, parent, _ in TREE:
        children[parent] = children.get(parent, 0) + counts[mark]
    own = {mark: counts[mark] - children.get(mark, 0) for mark, _, _ in TREE}
    own["outside"] = whole - counts["app"]
    return whole, counts, own


# An interpreted wrapper's frame around a sync layer (`--double` less a mark alone, measured
# 1.2-1.6 k a call, bench/README.md gateway round fifteen): the one part of marking a layer that
# lands elsewhere in `--double` than in the marked run (see `unmarked`).
SYNC_WRAPPER = 1430
SYNC_MARKS = {"parse", "resolve", "admission", "open_model", "turn_id", "encoder", "headers"}


def unmarked(own: dict[str, int], twice: dict[str, int], requests: int) -> dict[str, float]:
    """Each row less what marking costs in it. `twice` (`--double`, one marking more at each
    layer) grows each row by that cost, but for one part: a sync layer's extra wrapper frame
    runs inside its own row there, where in the marked run its wrapper runs in its parent's row.
    So a sync row gives back one wrapper frame, and its parent takes one per sync child."""
    out: dict[str, float] = {}
    for mark in own:
        cost = float(twice[mark] - own[mark])
        if mark in SYNC_MARKS:
            cost -= SYNC_WRAPPER * requests
        cost += SYNC_WRAPPER * requests * sum(1 for m, p, _ in TREE if p == mark and m in SYNC_MARKS)
        out[mark] = own[mark] - cost
    return out


def report(dump: Path, requests: int, plain: int | None = None, double: Path | None = None) -> str:
    """The table: each row's own and inclusive count per start; with `double` (one marking
    more at each layer) also each row less what marking costs in it (`unmarked`)."""
    whole, counts, own = rows(dump)
    for mark in (mark for mark, n in counts.items() if n == 0):  # a layer the code no longer has
        print(f"start_layers: mark {mark} counted nothing (see the server's log)", file=sys.stderr)
    twice = unmarked(own, rows(double)[2], requests) if double is not None else None
    inclusive = annotate(dump, True)
    marks_own = sum(n for s, n in annotate(dump, False).items() if "mark_" in s)
    k = 1e3 * requests
    extra = " marking's cost | own, unmarked |" if twice else ""
    lines = [
        f"| layer (k instructions per start, c = {args_concurrency}) | own | inclusive |{extra}",
        "|---|---:|---:|" + ("---:|---:|" if twice else ""),
        f"| **the whole start** (marked) | | **{whole / k:.1f}** |" + (" | |" if twice else ""),
    ]
    named = [("outside", "outside the app: uvicorn, the loop, the upstream's read callbacks", 0)]
    depth = {"": 0}
    for mark, parent, name in TREE:
        depth[mark] = depth[parent] + 1
        named.append((mark, name, depth[mark] - 1))
    for mark, name, level in named:
        line = f"| {'— ' * level}{name} | {own[mark] / k:.1f} | {counts.get(mark, 0) / k:.1f} |"
        if twice:
            line += f" {(own[mark] - twice[mark]) / k:.1f} | {twice[mark] / k:.1f} |"
        lines.append(line)
    lines.append(f"| the marks' own instructions (in the rows above) | {marks_own / k:.1f} | |")
    if twice:
        lines.append(f"| the rows unmarked, summed | {sum(twice.values()) / k:.1f} | |")
    if plain is not None:
        lines.append(
            f"| the whole start unmarked (`--plain`): marked - unmarked | {(whole - plain) / k:.1f} "
            f"| {plain / k:.1f} |"
        )
    lines.append("")
    lines.append("| of which, compiled (inclusive, the largest matching symbol) | under | k per start |")
    lines.append("|---|---|---:|")
    for under, pattern, name in COMPILED:
        found = max((n for s, n in inclusive.items() if re.search(pattern, s)), default=0)
        lines.append(f"| {name} | {under or 'the whole'} | {found / k:.1f} |")
    return "\n".join(lines)


args_concurrency = 16


def main() -> None:
    global args_concurrency
    if len(sys.argv) > 2 and sys.argv[1] == "--hook":  # the server, under callgrind
        serve_marked(sys.argv[2], sys.argv[3:])
        return
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=100)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--keep", help="keep the dumps here (marked.callgrind, plain.callgrind)")
    parser.add_argument("--marks-dir", default=str(Path(tempfile.gettempdir()) / "start_layers_marks"))
    parser.add_argument("--plain", action="store_true", help="also count an unmarked server")
    parser.add_argument("--report", help="print the table of a kept marked dump (with --requests)")
    parser.add_argument("--report-plain", help="with --report: the kept unmarked dump")
    parser.add_argument("--report-double", help="with --report: the kept dump with each mark twice")
    parser.add_argument(
        "--double",
        action="store_true",
        help="also count a server with each mark twice: one mark's cost in each row (its own column)",
    )
    parser.add_argument("--no-gc", action="store_true", help="the servers without collections")
    args = parser.parse_args()
    args_concurrency = args.concurrency
    if args.report:
        plain = total(Path(args.report_plain)) if args.report_plain else None
        double = Path(args.report_double) if args.report_double else None
        print(report(Path(args.report), args.requests, plain, double))
        return

    import gateway_targets
    import instructions
    from call_counts import body, load
    from gateway_targets import fast_upstream, start_sluicegate, wait_ready

    gateway_targets.wait_ready = functools.partial(wait_ready, seconds=1200)
    marks_dir = Path(args.marks_dir)
    build_marks(marks_dir)
    keep = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="start_layers_"))
    keep.mkdir(parents=True, exist_ok=True)
    instructions.KEEP = None
    dumps: dict[str, Path] = {}
    with tempfile.TemporaryDirectory() as tmp, fast_upstream(Path(tmp)) as up_port:
        labels = ["marked", *(["plain"] if args.plain else []), *(["double"] if args.double else [])]
        for label in labels:
            folder = Path(tmp) / label
            folder.mkdir()
            valgrind = [
                "valgrind",
                "--tool=callgrind",
                "--instr-atstart=no",
                f"--callgrind-out-file={folder}/cg.%p",
            ]
            hook = str(marks_dir) if label != "plain" else "-"  # "-": the hook without marks
            launcher = [*valgrind, sys.executable, str(Path(__file__).resolve()), "--hook", hook]
            env = {DOUBLE: "1" if label == "double" else "0", NO_GC: "1" if args.no_gc else "0"}
            proc, port = start_sluicegate(folder, up_port, ["fake-d0"], env=env, launcher=launcher)
            try:
                short = body(1, "fake-d0")
                load(port, short, 50, args.concurrency, 1)
                instructions.counted(
                    proc,
                    folder,
                    functools.partial(load, port, short, args.requests, args.concurrency, 1),
                )
                # the counted load's dump (the server's exit writes one more)
                dump = max(folder.glob("cg.*"), key=lambda p: p.stat().st_mtime)
                dumps[label] = keep / f"{label}.callgrind"
                dumps[label].write_bytes(dump.read_bytes())
            finally:
                proc.stop()
    plain = total(dumps["plain"]) if "plain" in dumps else None
    print(f"dumps: {keep}")
    print(report(dumps["marked"], args.requests, plain, dumps.get("double")))


if __name__ == "__main__":
    main()
