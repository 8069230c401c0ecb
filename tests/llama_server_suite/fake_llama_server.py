"""A stand-in for the `llama-server` binary llama.cpp's server tests start: it reads
llama-server's command line, writes the Sluicegate config that means the same, and becomes
`python -m sluicegate serve --config ...` (exec, so the tests' terminate/kill reach the server).

Run as `python fake_llama_server.py <llama-server flags>`; the runner writes a shell wrapper
that the suite finds through LLAMA_SERVER_BIN_PATH. Environment:
  SUITE_MODELS  the JSON map of model kinds to local files (models.build)
  SUITE_WORK    a folder for each launch's config and data directory
Flags with no Sluicegate counterpart are accepted and ignored (listed on stderr), as a user
moving from llama-server would find them: the tests that depend on them fail, and say so.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
import models


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="llama-server", add_help=False, allow_abbrev=False)
    p.add_argument("--port", type=int, default=8080)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--temp", type=float)
    p.add_argument("--seed", type=int)
    p.add_argument("-m", "--model")
    p.add_argument("--model-url")
    p.add_argument("-md", "--model-draft")
    p.add_argument("-hfr", "--hf-repo")
    p.add_argument("-hff", "--hf-file")
    p.add_argument("--alias", "-a")
    p.add_argument("--tags")
    p.add_argument("-c", "--ctx-size", type=int)
    p.add_argument("-np", "--parallel", type=int)
    p.add_argument("-b", "--batch-size", type=int)
    p.add_argument("-ub", "--ubatch-size", type=int)
    p.add_argument("-t", "--threads", type=int)
    p.add_argument("-ngl", "--n-gpu-layers", type=int)
    p.add_argument("-fa", "--flash-attn")
    p.add_argument("--embedding", "--embeddings", action="store_true")
    p.add_argument("--reranking", "--rerank", action="store_true")
    p.add_argument("--api-key")
    p.add_argument("--chat-template")
    p.add_argument("--chat-template-file")
    p.add_argument("--reasoning-format")
    p.add_argument("-rea", "--reasoning")
    p.add_argument("--cors-origins")
    p.add_argument("--spec-type")
    p.add_argument("--spec-draft-n-max", type=int)
    p.add_argument("--spec-draft-n-min", type=int)
    p.add_argument("--spec-draft-p-min", "--draft-p-min", type=float)
    p.add_argument("--spec-synth-rates")
    p.add_argument("--spec-synth-len")
    p.add_argument("--context-shift", dest="context_shift", action="store_true", default=None)
    p.add_argument("--no-context-shift", dest="context_shift", action="store_false")
    p.add_argument("--mmproj-url")
    p.add_argument("--no-mmproj", action="store_true")
    p.add_argument("--lora", action="append", default=[])
    p.add_argument("--no-cont-batching", action="store_true")
    p.add_argument("-kvu", "--kv-unified", action="store_true")
    p.add_argument("--slot-save-path")
    p.add_argument("--media-path")
    p.add_argument("--no-prefill-assistant", action="store_true")
    p.add_argument(
        "--verbose", "-v", "--log-verbose", action="store_true"
    )  # `__verbose` in every chat answer
    p.add_argument("-n", "--n-predict", type=int)
    p.add_argument("--metrics", action="store_true")  # llama-server's /metrics is off without it
    p.add_argument("--slots", dest="no_slots", action="store_false")
    p.add_argument("--no-slots", dest="no_slots", action="store_true")
    p.add_argument("--sleep-idle-seconds", type=float)  # -1: never (llama-server's default)
    p.add_argument("--tools")  # not served; it only changes the CORS default (below)
    return p


def _aliases(options: argparse.Namespace) -> list[str]:
    """llama-server's `--alias a,b`: every name; its id is the first in sorted order (a set)."""
    return sorted({a.strip() for a in str(options.alias or "").split(",") if a.strip()})


def _model_id(options: argparse.Namespace) -> str:
    if aliases := _aliases(options):
        return aliases[0]
    named = options.hf_file or options.hf_repo or options.model or "model"
    return Path(str(named).split(":", 1)[0]).name.removesuffix(".gguf")


def model_table(
    options: argparse.Namespace, paths: dict[str, str]
) -> tuple[dict[str, Any] | None, list[str]]:
    """The [[models]] table, or None (llama-server's router mode: no model given); and notes."""
    notes: list[str] = []
    kind = models.lookup(options.hf_repo, options.hf_file)
    if options.model:
        path = options.model
    elif options.hf_repo:
        if kind is None:
            notes.append(
                f"unknown Hub model {options.hf_repo} {options.hf_file}: served by the text stand-in"
            )
            kind = "text"
        path = paths[kind]
    else:
        return None, notes
    table: dict[str, Any] = {"id": _model_id(options), "engine": "llamacpp", "path": path}
    if len(aliases := _aliases(options)) > 1:
        table["aliases"] = aliases[1:]
    if options.tags:
        table["tags"] = [t.strip() for t in options.tags.split(",") if t.strip()]
    if options.ctx_size:
        # llama-server's -c is the whole KV cache, split among the -np slots unless unified;
        # Sluicegate's context_length is each sequence's.
        per_slot = options.ctx_size if options.kv_unified else options.ctx_size // (options.parallel or 1)
        table["context_length"] = max(16, per_slot)
    if options.parallel:
        table["parallel"] = options.parallel
    if options.batch_size:
        table["batch_size"] = options.batch_size
    if options.threads:
        table["threads"] = options.threads
    if options.seed is not None and options.seed >= 0:
        table["seed"] = options.seed
    if options.sleep_idle_seconds is not None and options.sleep_idle_seconds > 0:
        # llama-server's sleep: the model unloaded when idle, reloaded by the next request
        # (`/props` `is_sleeping`); Sluicegate's idle `ttl` of a just-in-time loaded model.
        table["ttl"] = options.sleep_idle_seconds
    if options.flash_attn in ("on", "off"):
        table["flash_attention"] = options.flash_attn == "on"
    if options.embedding:
        table["embedding"] = True
    if options.reranking:
        table["rerank"] = True
    if options.no_cont_batching:
        table["batching"] = False
    template = options.chat_template_file or options.chat_template
    if template and ("{" in template or Path(template).is_file() or template in _builtin_templates()):
        table["chat_template"] = template  # Jinja, a file, or a built-in template's name
    elif template:  # llama-server reads any other text as a Jinja template with no tags
        table["chat_template"] = "{#- the text as it is -#}" + template
    reasoning = _reasoning(options, notes)
    table.update(reasoning)
    if options.model_draft:
        table["draft_model"] = options.model_draft
        if options.spec_draft_n_max:
            table["draft_max"] = options.spec_draft_n_max
        if options.spec_draft_n_min is not None:
            table["draft_min"] = min(options.spec_draft_n_min, table.get("draft_max", 16))
        # llama-server keeps every drafted token however unsure the draft model is (its
        # --spec-draft-p-min defaults to 0); Sluicegate's `draft_p_min` defaults to 0.75.
        table["draft_p_min"] = options.spec_draft_p_min if options.spec_draft_p_min is not None else 0.0
        if "draft_adaptive" in _llamacpp_keys():  # llama-server drafts in full at every step
            table["draft_adaptive"] = False
    elif options.spec_type and "ngram" in options.spec_type:
        table["speculative"] = "ngram"
    if options.spec_synth_rates is not None or options.spec_synth_len is not None:
        notes.append(
            "--spec-synth-rates/--spec-synth-len: synthetic draft acceptance (benchmarking only) is not built"
        )
    if options.context_shift is not None:
        if "context_shift" in _llamacpp_keys():
            table["context_shift"] = options.context_shift
        else:
            notes.append("--context-shift: not in this Sluicegate")
    sampling = _sampling(options)
    if sampling and "sampling" in _model_keys():
        table["sampling"] = sampling
    elif sampling:
        notes.append("--temp/--n-predict: no per-model sampling defaults in this Sluicegate")
    if options.lora:
        if "lora" in _llamacpp_keys():
            table["lora"] = [str(Path(f).resolve()) for f in options.lora]
        else:
            notes.append("--lora: LoRA adapters are not supported")
    return table, notes


def _reasoning(options: argparse.Namespace, notes: list[str]) -> dict[str, Any]:
    """`--reasoning on|off|auto` as the model's `thinking`; `--reasoning-format none` (thoughts
    left in the content) as `reasoning = "none"`."""
    table: dict[str, Any] = {}
    if options.reasoning is not None:
        value = {"1": "on", "true": "on", "0": "off", "false": "off"}.get(
            options.reasoning, options.reasoning
        )
        if "thinking" in _llamacpp_keys() and value in ("on", "off", "auto"):
            table["thinking"] = value
        else:
            notes.append(f"--reasoning {options.reasoning}: not mapped")
    if options.reasoning_format == "none":
        table["reasoning"] = "none"
    return table


def _builtin_templates() -> frozenset[str]:
    try:
        from sluicegate.engines.llamacpp.fallback_templates import BUILTIN
    except ImportError:
        return frozenset()
    return frozenset(BUILTIN)


def _sampling(options: argparse.Namespace) -> dict[str, Any]:
    """llama-server's server-wide sampling defaults, as the model's `sampling` table."""
    sampling: dict[str, Any] = {}
    if options.temp is not None:
        sampling["temperature"] = max(0.0, min(2.0, options.temp))  # llama-server: <= 0 is greedy
    if options.n_predict is not None and options.n_predict > 0:  # -1: until the model stops
        sampling["max_tokens"] = options.n_predict
    if options.seed is not None and options.seed >= 0:  # the seed of requests that give none
        sampling["seed"] = options.seed
    return sampling


def _model_keys() -> tuple[str, ...]:
    from sluicegate.engines.lookup import MODEL_KEYS

    return MODEL_KEYS


def _llamacpp_keys() -> frozenset[str]:
    from sluicegate.engines.llamacpp.settings import KEYS

    return KEYS


def _server_fields() -> set[str]:
    from sluicegate.config import Settings

    return {f.name for f in dataclasses.fields(Settings)}


def server_table(options: argparse.Namespace, model: dict[str, Any] | None, data_dir: Path) -> dict[str, Any]:
    table: dict[str, Any] = {"data_dir": str(data_dir)}
    known = _server_fields()
    if options.api_key:
        table["api_keys"] = [options.api_key]
    # llama-server answers every origin unless told otherwise, and serves its one model under
    # any name: both are settings in Sluicegate, set where this version has them.
    if "cors_origins" in known:
        # llama-server's default is every origin, but only this machine's once --tools is on
        origins = options.cors_origins or ("localhost" if options.tools else "*")
        table["cors_origins"] = [o.strip() for o in origins.split(",") if o.strip()]
    if "default_model" in known and model is not None:
        table["default_model"] = model["id"]
    if "metrics" in known:
        table["metrics"] = options.metrics
    if "slots" in known:
        table["slots"] = not options.no_slots
    if "slot_save_path" in known and options.slot_save_path:
        table["slot_save_path"] = str(Path(options.slot_save_path).resolve())
    if "allow_image_urls" in known:  # llama-server downloads every http(s) image URL it is sent
        table["allow_image_urls"] = True
    if "media_path" in known and options.media_path:  # file:// image URLs are read under it
        table["media_path"] = str(Path(options.media_path).resolve())
    return table


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, dict):  # an inline table
        return "{ " + ", ".join(f"{k} = {_toml(v)}" for k, v in value.items()) + " }"
    raise TypeError(f"cannot write {value!r} as TOML")


def chat_table(options: argparse.Namespace) -> dict[str, Any]:
    """llama-server continues a last assistant message (a prefill) unless told not to, and
    `--verbose` adds `__verbose` to every non-streamed chat answer."""
    fields = _server_fields()
    table: dict[str, Any] = {}
    if "prefill_assistant" in fields:
        table["prefill_assistant"] = not options.no_prefill_assistant
    if options.verbose and "verbose" in fields:
        table["verbose"] = True
    return table


def write_config(
    folder: Path, server: dict[str, Any], model: dict[str, Any] | None, chat: dict[str, Any] | None = None
) -> Path:
    lines = ["[server]", *(f"{k} = {_toml(v)}" for k, v in server.items())]
    if chat:
        lines += ["", "[chat_completions]", *(f"{k} = {_toml(v)}" for k, v in chat.items())]
    if model is not None:
        lines += ["", "[[models]]", *(f"{k} = {_toml(v)}" for k, v in model.items())]
    path = folder / "sluicegate.toml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _absolute(options: argparse.Namespace) -> None:
    """Paths as llama-server reads them, from its working directory (the suite's `./tmp/...`);
    Sluicegate would read a relative path from the config's folder."""
    for name in ("model", "model_draft", "chat_template_file"):
        value = getattr(options, name)
        if value and Path(value).exists():
            setattr(options, name, str(Path(value).resolve()))


def main(argv: list[str]) -> None:
    options, ignored = parser().parse_known_args(argv)
    _absolute(options)
    paths = models.read_map(os.environ["SUITE_MODELS"])
    work = Path(os.environ.get("SUITE_WORK") or tempfile.gettempdir())
    work.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix="launch-", dir=work))
    model, notes = model_table(options, paths)
    if model is not None and options.no_mmproj:
        # Sluicegate finds an `mmproj*.gguf` beside the model: a link to the model alone, in a
        # folder of its own, is the model without its projector.
        alone = folder / "no-mmproj" / Path(model["path"]).name
        alone.parent.mkdir()
        alone.symlink_to(Path(model["path"]).resolve())
        model["path"] = str(alone)
    config = write_config(folder, server_table(options, model, folder / "data"), model, chat_table(options))
    if ignored:
        notes.append(f"ignored flags: {' '.join(ignored)}")
    for note in notes:
        print(f"fake llama-server: {note}", file=sys.stderr)
    print(f"fake llama-server: {config.read_text()}", file=sys.stderr, flush=True)
    command = [sys.executable, "-m", "sluicegate", "serve", "--config", str(config)]
    command += ["--host", options.host, "--port", str(options.port)]  # "a,b": both addresses
    os.execv(sys.executable, command)


if __name__ == "__main__":
    main(sys.argv[1:])
