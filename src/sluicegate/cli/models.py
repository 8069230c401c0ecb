"""`sluicegate models ...`: list, load and unload on a running server; download and make-demo
without one.

The server commands are thin clients of the LM Studio models API (`/api/v1/models`, `…/load`,
`…/unload`) at `--url` (default: the configured host and port), sending the configured API key
(`SLUICEGATE_API_KEY`) when there is one. `download` fetches from the Hub directly.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sluicegate.cli.parse import add_command as add_parse_command
from sluicegate.cli.render import add_render_command
from sluicegate.config import Settings, models_dir
from sluicegate.engines.downloads import DownloadError, describe, fetch, is_present, resolve

if TYPE_CHECKING:  # imported where used: `sluicegate serve` builds this parser too
    import httpx

Json = dict[str, Any]
LOAD_TIMEOUT = 900.0  # a big model on a slow disk
TTL_HEADER = "X-Sluicegate-TTL"  # see routes/lmstudio_models.py


class CommandError(Exception):
    """A failure to report in one line (exit status 1)."""


def add_commands(commands: Any) -> None:
    """The `models` subcommands, on the `models` parser's subparsers."""
    listing = commands.add_parser("list", help="list the server's models and their loaded instances")
    listing.add_argument("--json", action="store_true", help="print the server's JSON as it is")
    load = commands.add_parser("load", help="load a model on the running server")
    load.add_argument("model", help="model id")
    load.add_argument("--ttl", type=float, help="unload after this many idle seconds (default: never)")
    load.add_argument("--context-length", type=int, help="context length to load with")
    unload = commands.add_parser("unload", help="unload a model instance on the running server")
    which = unload.add_mutually_exclusive_group(required=True)
    which.add_argument("instance", nargs="?", help="instance id (a model id, or e.g. `my-model:2`)")
    which.add_argument("--all", action="store_true", help="unload every loaded instance")
    for parser in (listing, load, unload):
        parser.add_argument("--url", help="server URL (default: http://<host>:<port> from the config)")
        parser.add_argument("--config", help="TOML config file (env SLUICEGATE_CONFIG)")
    download = commands.add_parser("download", help="download a GGUF model from the Hugging Face Hub")
    download.add_argument("model", help="repo id (OWNER/REPO) or https://huggingface.co/... URL")
    download.add_argument("--quantization", help="which file, e.g. Q4_K_M (needed when there are several)")
    download.add_argument("--models-dir", help="where to put it (default: [server] models_dir)")
    download.add_argument("--config", help="TOML config file (env SLUICEGATE_CONFIG)")
    demo = commands.add_parser(
        "make-demo", help="write a tiny GGUF with random weights (it talks nonsense) for trying things out"
    )
    demo.add_argument("path", help="where to write the .gguf file")
    demo.add_argument(
        "--size", choices=["tiny", "bench"], default="tiny", help="tiny: ~2.5 MB, bench: ~70 MB"
    )
    demo.add_argument("--seed", type=int, default=0, help="the same seed writes the same file")
    demo.add_argument(
        "--endless", action="store_true", help="never end a reply by itself (replies run to max_tokens)"
    )
    demo.add_argument(
        "--fim",
        action="store_true",
        help="give the tokenizer fill-in-the-middle tokens (for /infill and completions with a suffix)",
    )
    kind = demo.add_mutually_exclusive_group()
    kind.add_argument(
        "--vision", action="store_true", help="also write a vision projector (mmproj-<name>.gguf) beside it"
    )
    kind.add_argument(
        "--audio",
        action="store_true",
        help="also write an audio projector (mmproj-<name>.gguf, Ultravox-style) beside it",
    )
    kind.add_argument("--rerank", action="store_true", help="a reranker (for POST /v1/rerank) instead")
    add_parse_command(commands)
    add_render_command(commands)


def make_demo(args: argparse.Namespace) -> int:
    from sluicegate.demo.model import make_demo_gguf  # numpy and gguf only when asked

    if args.vision or args.audio:
        from sluicegate.demo.audio import make_demo_audio
        from sluicegate.demo.vision import make_demo_vision

        make_pair = make_demo_vision if args.vision else make_demo_audio
        mmproj = make_pair(args.path, size=args.size, seed=args.seed, ends_replies=not args.endless)
        path = Path(args.path)
        sense = "vision" if args.vision else "audio"
        print(f"wrote {path} ({path.stat().st_size} bytes): random weights, it talks nonsense")
        print(f"wrote {mmproj} ({mmproj.stat().st_size} bytes): its {sense} projector, random weights too")
        return 0
    path = make_demo_gguf(
        args.path,
        size=args.size,
        seed=args.seed,
        ends_replies=not args.endless,
        rerank=args.rerank,
        fim=args.fim,
    )
    print(f"wrote {path} ({path.stat().st_size} bytes): random weights, it talks nonsense")
    return 0


def run(args: argparse.Namespace, settings: Settings) -> int:
    try:
        if args.models_command == "download":
            return _download(args, settings)
        with _client(args, settings) as client:
            if args.models_command == "list":
                return _list(client, args.json)
            if args.models_command == "load":
                return _load(client, args.model, args.ttl, args.context_length)
            return _unload(client, args.instance, args.all)
    except CommandError as exc:
        print(f"sluicegate: {exc}", file=sys.stderr)
        return 1


def _client(args: argparse.Namespace, settings: Settings) -> httpx.Client:
    host = "127.0.0.1" if settings.host in ("0.0.0.0", "::", "") else settings.host
    url = args.url or f"http://{host}:{settings.port}"
    headers = {"Authorization": f"Bearer {settings.api_keys[0]}"} if settings.api_keys else {}
    import httpx

    return httpx.Client(base_url=url.rstrip("/"), headers=headers, timeout=30.0)


def _call(client: httpx.Client, method: str, path: str, **kwargs: Any) -> Json:
    import httpx

    try:
        response = client.request(method, path, **kwargs)
    except httpx.TransportError as exc:
        raise CommandError(
            f"no Sluicegate server answers at {client.base_url} ({exc}); start one with `sluicegate serve`"
        ) from exc
    try:
        body: Json = response.json()
    except ValueError:
        body = {}
    if response.status_code != 200:
        error = body.get("error")
        message = error.get("message") if isinstance(error, dict) else None
        message = message or response.text or response.reason_phrase
        raise CommandError(f"{response.status_code}: {message}")
    return body


def _list(client: httpx.Client, as_json: bool) -> int:
    body = _call(client, "GET", "/api/v1/models")
    if as_json:
        print(json.dumps(body, indent=2))
        return 0
    for model in body.get("models", []):
        instances = [i["id"] for i in model.get("loaded_instances", [])]
        state = "loaded: " + ", ".join(instances) if instances else "not loaded"
        print(f"{model['key']}\t{state}\t{model.get('display_name') or ''}")
    return 0


def _load(client: httpx.Client, model: str, ttl: float | None, context_length: int | None) -> int:
    body: Json = {"model": model}
    if context_length is not None:
        body["context_length"] = context_length
    headers = {TTL_HEADER: repr(ttl)} if ttl is not None else {}
    out = _call(client, "POST", "/api/v1/models/load", json=body, headers=headers, timeout=LOAD_TIMEOUT)
    print(f"loaded {out['instance_id']} in {out['load_time_seconds']:.2f} s")
    return 0


def _unload(client: httpx.Client, instance: str | None, every: bool) -> int:
    if every:
        models = _call(client, "GET", "/api/v1/models").get("models", [])
        targets = [i["id"] for m in models for i in m.get("loaded_instances", [])]
        if not targets:
            print("nothing is loaded")
    else:
        assert instance is not None
        targets = [instance]
    for target in targets:
        _call(client, "POST", "/api/v1/models/unload", json={"instance_id": target})
        print(f"unloaded {target}")
    return 0


def _download(args: argparse.Namespace, settings: Settings) -> int:
    folder = Path(args.models_dir).expanduser().resolve() if args.models_dir else models_dir(settings)
    try:
        target = resolve(args.model, args.quantization, folder)
    except DownloadError as exc:
        raise CommandError(str(exc)) from exc
    except Exception as exc:
        raise CommandError(describe(exc, args.model)) from exc
    if is_present(target):
        print(f"already downloaded: {target.destination}")
        return 0
    size = f" ({target.size / 1e6:.1f} MB)" if target.size else ""
    print(f"downloading {target.repo_id}/{target.filename}{size} to {target.folder}", flush=True)
    if target.projector is not None:
        print(f"with its vision projector {target.projector}", flush=True)
    try:
        path = fetch(target)  # huggingface_hub draws its progress bar on a terminal
    except Exception as exc:
        raise CommandError(describe(exc, args.model)) from exc
    print(f"downloaded {path}")
    return 0
