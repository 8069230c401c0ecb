"""Command line: `sluicegate serve`, `sluicegate chat`, `sluicegate models list|load|unload|download|make-demo|parse|render`,
`sluicegate keys create|list|get|update|revoke`, `--version`."""

from __future__ import annotations

import argparse
import sys

from sluicegate import __version__
from sluicegate.cli.chat import add_command as add_chat_command
from sluicegate.cli.keys import add_commands as add_key_commands
from sluicegate.cli.keys import run as run_keys_command
from sluicegate.cli.models import add_commands as add_model_commands
from sluicegate.cli.models import make_demo
from sluicegate.cli.models import run as run_models_command
from sluicegate.cli.parse import parse_output
from sluicegate.cli.render import render_command
from sluicegate.config import Settings, load_settings
from sluicegate.core.errors import ConfigError
from sluicegate.observe.logs import configure_logging


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sluicegate", description=__doc__)
    parser.add_argument("--version", action="version", version=f"sluicegate {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="run the server")
    serve.add_argument("--config", help="TOML config file (env SLUICEGATE_CONFIG)")
    serve.add_argument("--host", help="interface to listen on (default 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port to listen on (default 8321)")
    serve.add_argument("--log-level", choices=["debug", "info", "warning", "error"])
    serve.add_argument(
        "--workers", type=int, help="server processes on the port (default 1; more need the Redis store)"
    )
    serve.add_argument(
        "--log-format", choices=["text", "json"], help="text (default) or one JSON object per line"
    )
    serve.add_argument(
        "--log-prompts",
        action="store_true",
        default=None,
        help="put request bodies and answers in the access log (off by default)",
    )

    add_chat_command(commands)

    models = commands.add_parser("models", help="list, load, unload and download models")
    add_model_commands(models.add_subparsers(dest="models_command", required=True))

    keys = commands.add_parser("keys", help="issue, list and revoke API keys in the configured store")
    add_key_commands(keys.add_subparsers(dest="keys_command", required=True))
    return parser


def _settings(args: argparse.Namespace) -> Settings:
    settings = load_settings(args.config)
    if getattr(args, "host", None):
        settings.host = args.host
    if getattr(args, "port", None) is not None:
        settings.port = args.port
    if getattr(args, "workers", None) is not None:
        if args.workers < 1:
            raise ConfigError("--workers must be at least 1")
        settings.workers = args.workers
    if getattr(args, "log_level", None):
        settings.log_level = args.log_level
    if getattr(args, "log_format", None):
        settings.log_format = args.log_format
    if getattr(args, "log_prompts", None):
        settings.log_prompts = True
    return settings


def _serve(settings: Settings) -> int:
    from sluicegate.app.factory import create_app
    from sluicegate.app.serving import address_list, check_workers, serve_one, serve_workers

    configure_logging(settings.log_level, settings.log_format)
    from sluicegate.engines.model_files import ensure_demo_model

    demo = ensure_demo_model(settings)
    if demo is not None:
        print(
            f"No models yet: wrote a tiny demo model to {demo} (random weights, it talks nonsense).",
            flush=True,
        )
    app = create_app(settings)
    registry = app.state.sluicegate.registry
    check_workers(settings, registry)
    workers = f", {settings.workers} workers" if settings.workers > 1 else ""
    print(
        f"Sluicegate {__version__} on {address_list(settings)}{workers}  models: {', '.join(registry.models)}",
        flush=True,
    )
    if settings.workers > 1:
        serve_workers(settings)  # each worker builds its own app; this one only checked the config
    else:
        serve_one(app, settings)
    return 0


def _chat(args: argparse.Namespace, settings: Settings) -> int:
    from sluicegate.cli.chat import run

    host = "127.0.0.1" if settings.host in ("0.0.0.0", "::", "") else settings.host
    url = args.url or f"http://{host}:{settings.port}"
    api_key = args.api_key or (settings.api_keys[0] if settings.api_keys else None)
    return run(args, url.rstrip("/"), api_key, settings.data_dir / "chat_history")


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if getattr(args, "models_command", None) == "make-demo":
        return make_demo(args)  # needs no config
    if getattr(args, "models_command", None) == "parse":
        return parse_output(args)  # needs no config either
    if getattr(args, "models_command", None) == "render":
        return render_command(args)  # needs no config
    try:
        settings = _settings(args)
        if args.command == "serve":
            return _serve(settings)
        if args.command == "chat":
            return _chat(args, settings)
        if args.command == "keys":
            return run_keys_command(args, settings)
        return run_models_command(args, settings)
    except ConfigError as exc:
        print(f"sluicegate: configuration error: {exc}", file=sys.stderr)
        return 2
