"""`sluicegate models list|load|unload` against a running server, and `models download` alone."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from conftest import StartServer
from e2e_support import Server, poll, scripted, server_env
from fake_hub import FakeHub

pytestmark = pytest.mark.e2e

API_KEY = "sk-cli-test"
Q4 = b"GGUF" + bytes(range(256)) * 32
Q8 = b"GGUF" + bytes(range(256)) * 64


def sluicegate(
    *args: str, folder: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sluicegate", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=folder,
        env=server_env(folder) | (env or {}),
    )


@pytest.fixture(scope="module")
def server(start_server: StartServer) -> Server:
    return start_server(
        {"api_key": API_KEY, "reaper_interval_seconds": 0.2},
        [scripted("alpha", "chat.yaml"), scripted("beta", "lmstudio_jit.yaml")],
    )


def cli(server: Server, *args: str, key: str | None = API_KEY) -> subprocess.CompletedProcess[str]:
    env = {"SLUICEGATE_API_KEY": key} if key else {}
    return sluicegate("models", *args, "--url", server.base_url, folder=server.folder, env=env)


def loaded(server: Server) -> dict[str, list[str]]:
    response = httpx.get(
        server.base_url + "/api/v1/models", headers={"Authorization": f"Bearer {API_KEY}"}, timeout=10
    )
    assert response.status_code == 200, response.text
    return {m["key"]: [i["id"] for i in m["loaded_instances"]] for m in response.json()["models"]}


def test_load_list_unload(server: Server) -> None:
    listed = cli(server, "list")
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.splitlines() == [
        "alpha\tnot loaded\talpha (scripted)",
        "beta\tnot loaded\tbeta (scripted)",
    ]
    load = cli(server, "load", "alpha", "--context-length", "4096")
    assert load.returncode == 0, load.stderr
    assert load.stdout.startswith("loaded alpha in ")
    second = cli(server, "load", "alpha")
    assert second.returncode == 0 and second.stdout.startswith("loaded alpha:2 in "), second
    assert loaded(server)["alpha"] == ["alpha", "alpha:2"]
    assert "alpha\tloaded: alpha, alpha:2\t" in cli(server, "list").stdout

    unload = cli(server, "unload", "alpha:2")
    assert (unload.returncode, unload.stdout) == (0, "unloaded alpha:2\n"), unload.stderr
    assert cli(server, "load", "beta").returncode == 0
    everything = cli(server, "unload", "--all")
    assert everything.returncode == 0, everything.stderr
    assert sorted(everything.stdout.splitlines()) == ["unloaded alpha", "unloaded beta"]
    assert loaded(server) == {"alpha": [], "beta": []}
    assert cli(server, "unload", "--all").stdout == "nothing is loaded\n"


def test_load_with_a_ttl_unloads_once_idle(server: Server) -> None:
    load = cli(server, "load", "beta", "--ttl", "1")
    assert load.returncode == 0, load.stderr
    poll(lambda: loaded(server)["beta"] == [], 30.0, 0.1, fail=True)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("load", "gamma"), "404: Model 'gamma' not found."),
        (("unload", "gamma"), "404: Model 'gamma' not found."),
        (("load", "alpha", "--context-length", "99999999"), "400: "),
        (("load", "alpha", "--ttl", "0"), "400: X-Sluicegate-TTL must be a number of seconds >= 1"),
    ],
)
def test_server_errors_are_one_line_and_exit_1(server: Server, args: tuple[str, ...], message: str) -> None:
    result = cli(server, *args)
    assert result.returncode == 1, result
    assert result.stderr.startswith(f"sluicegate: {message}"), result.stderr
    assert "Traceback" not in result.stderr


def test_the_api_key_comes_from_the_environment(server: Server) -> None:
    result = cli(server, "list", key=None)
    assert result.returncode == 1 and result.stderr.startswith("sluicegate: 401: "), result.stderr


def test_no_server_is_a_clear_error(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    result = sluicegate("models", "list", "--url", url, folder=tmp_path)
    assert result.returncode == 1
    assert result.stderr.startswith(f"sluicegate: no Sluicegate server answers at {url}"), result.stderr


# --- download, no server needed -----------------------------------------------------------------


@pytest.fixture(scope="module")
def hub() -> Iterator[FakeHub]:
    fake = FakeHub()
    fake.add("acme/Tiny-GGUF", {"tiny-Q4_K_M.gguf": Q4, "tiny-Q8_0.gguf": Q8})
    with fake.running():
        yield fake


def test_download(hub: FakeHub, tmp_path: Path) -> None:
    def download(*args: str) -> subprocess.CompletedProcess[str]:
        return sluicegate(
            "models",
            "download",
            *args,
            "--models-dir",
            str(tmp_path / "models"),
            folder=tmp_path,
            env=hub.env(tmp_path),
        )

    path = tmp_path / "models" / "acme" / "Tiny-GGUF" / "tiny-Q8_0.gguf"
    result = download("https://huggingface.co/acme/Tiny-GGUF", "--quantization", "Q8_0")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == f"downloaded {path}"
    assert path.read_bytes() == Q8
    again = download("acme/Tiny-GGUF", "--quantization", "q8_0")
    assert (again.returncode, again.stdout) == (0, f"already downloaded: {path}\n")

    choose = download("acme/Tiny-GGUF")
    assert choose.returncode == 1
    assert "choose one with `quantization`: Q4_K_M (tiny-Q4_K_M.gguf), Q8_0 (tiny-Q8_0.gguf)" in choose.stderr
    missing = download("acme/nothing-here")
    assert missing.returncode == 1
    assert missing.stderr == (
        "sluicegate: Repository 'acme/nothing-here' was not found on the Hub (or it is private or gated).\n"
    )


def test_download_goes_to_the_configured_models_dir(hub: FakeHub, tmp_path: Path) -> None:
    config = tmp_path / "sluicegate.toml"
    config.write_text('[server]\nmodels_dir = "weights"\n')
    result = sluicegate(
        "models",
        "download",
        "acme/Tiny-GGUF",
        "--quantization",
        "Q4_K_M",
        "--config",
        str(config),
        folder=tmp_path,
        env=hub.env(tmp_path),
    )
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "weights" / "acme" / "Tiny-GGUF" / "tiny-Q4_K_M.gguf").read_bytes() == Q4
