"""A pytest plugin (`-p suite_offline`) that keeps the suite off the network: the test
pictures some tests fetch with `requests.get` from the Hub are served from the local stand-in
(models.URLS); every other request goes out as usual (to the loopback server)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import requests
from models import URLS, read_map

_get = requests.get


def _local(url: str) -> requests.Response | None:
    name = url.rsplit("/", 1)[-1]
    if "huggingface.co" not in url or name not in URLS:
        return None
    response = requests.Response()
    response.status_code = 200
    response.url = url
    response._content = Path(read_map(os.environ["SUITE_MODELS"])[URLS[name]]).read_bytes()
    response.headers["Content-Type"] = "image/png"
    return response


def get(url: str | bytes, params: Any = None, **kwargs: Any) -> requests.Response:
    local = _local(url.decode() if isinstance(url, bytes) else url)
    return local if local is not None else _get(url, params=params, **kwargs)


requests.get = get  # type: ignore[assignment]
