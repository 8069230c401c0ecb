"""Command line: `sluicegate serve`, `sluicegate models list|load|unload|download|make-demo`, `--version`."""

from __future__ import annotations

import argparse
import logging
import sys

from sluicegate import __version__
from sluicegate.cli_models import add_commands as add_model_commands
from sluicegate.cli_models import make_demo
from sluicegate.cli_models import run as run_models_command
from sluicegate.config import Settings, load_settings
from sluicegate.core.errors import ConfigError


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sluicegate", description=__doc__)
    parser.add_argument("--version", action="version", version=f"sluicegate {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="run the server")
    serve.add_argument("--config", help="TOML config file (env SLUICEGATE_CONFIG)")
    serve.add_argument("--host", help="interface to listen on (default 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port to listen on (default 8321)")
    serve.add_argument("--log-level", choices=["debug", "info", "warning", "error"])

    models = commands.add_parser("models", help="list, load, unload and download models")
    add_model_commands(models.add_subparsers(dest="models_command", required=True))
    return parser


def _settings(args: argparse.Namespace) -> Settings:
    settings = load_settings(args.config)
    if getattr(args, "host", None):
        settings.host = args.host
    if getattr(args, "port", None) is not None:
        settings.port = args.port
    if getattr(args, "log_level", None):
        settings.log_level = args.log_level
    return settings


def _serve(settings: Settings) -> int:
    import uvicorn

    from sluicegate.server import create_app

    logging.basicConfig(
        level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    from sluicegate.engines.model_files import ensure_demo_model

    demo = ensure_demo_model(settings)
    if demo is not None:
        print(
            f"No models yet: wrote a tiny demo model to {demo} (random weights, it talks nonsense).",
            flush=True,
        )
    app = create_app(settings)
    print(
        f"Sluicegate {__version__} on http://{settings.host}:{settings.port}  models: {', '.join(app.state.sluicegate.registry.models)}",
        flush=True,
    )
    uvicorn.run(
        app,
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level,
        timeout_graceful_shutdown=5,
        access_log=settings.log_level == "debug",
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if getattr(args, "models_command", None) == "make-demo":
        return make_demo(args)  # needs no config
    try:
        settings = _settings(args)
        if args.command == "serve":
            return _serve(settings)
        return run_models_command(args, settings)
    except ConfigError as exc:
        print(f"sluicegate: configuration error: {exc}", file=sys.stderr)
        return 2
