"""Per-request MCP server URLs: what is refused, what an allow-list lets through, and pinning."""

from __future__ import annotations

from ipaddress import IPv4Address

import httpx2
import pytest

from mcp_fixtures import HttpMcpServer, mcp_http_server
from sluicegate.tools.pinned import PinnedTransport
from sluicegate.tools.ssrf import AllowList, Target, UrlRefused, check_url

__all__ = ["mcp_http_server"]

REFUSED = [
    "http://127.0.0.1:9000/mcp",  # loopback
    "http://127.8.9.10/mcp",
    "http://10.1.2.3/mcp",  # private
    "http://172.16.0.1/mcp",
    "http://192.168.1.1/mcp",
    "http://169.254.169.254/latest/meta-data",  # link-local (cloud metadata)
    "http://100.64.0.1/mcp",  # shared address space
    "http://0.0.0.0:8080/mcp",  # unspecified
    "http://224.0.0.1/mcp",  # multicast
    "http://240.0.0.1/mcp",  # reserved
    "http://[::1]:9000/mcp",  # IPv6 loopback
    "http://[fe80::1]/mcp",  # IPv6 link-local
    "http://[fc00::1]/mcp",  # IPv6 unique local
    "http://[::]/mcp",
    "http://[ff02::1]/mcp",
    "http://[::ffff:127.0.0.1]/mcp",  # IPv4-mapped loopback
    "http://[::ffff:169.254.169.254]/mcp",
    "http://[64:ff9b::a00:1]/mcp",  # NAT64 spelling of 10.0.0.1
    "http://[2002:c0a8:101::1]/mcp",  # 6to4 spelling of 192.168.1.1
    "http://localhost:9000/mcp",  # a name that resolves to loopback
]


@pytest.mark.parametrize("url", REFUSED)
async def test_non_public_addresses_are_refused(url: str) -> None:
    with pytest.raises(UrlRefused, match="non-public address"):
        await check_url(url, AllowList())


@pytest.mark.parametrize("url", ["https://8.8.8.8/mcp", "http://[2606:4700:4700::1111]:8080/mcp"])
async def test_public_addresses_pass_and_are_pinned(url: str) -> None:
    target = await check_url(url, AllowList())
    assert str(target.address) in url


@pytest.mark.parametrize(
    "url",
    ["ftp://8.8.8.8/x", "file:///etc/passwd", "http:///mcp", "gopher://1.1.1.1", "http://1.1.1.1:99999/"],
)
async def test_only_http_urls_with_a_host(url: str) -> None:
    with pytest.raises(UrlRefused):
        await check_url(url, AllowList())


async def test_unresolvable_hosts_are_refused() -> None:
    with pytest.raises(UrlRefused, match="cannot be resolved"):
        await check_url("http://no-such-host.invalid/mcp", AllowList())


@pytest.mark.parametrize(
    ("entries", "url"),
    [
        (["127.0.0.1:9000"], "http://127.0.0.1:9000/mcp"),
        (["127.0.0.1"], "http://127.0.0.1:1234/mcp"),
        (["10.0.0.0/8"], "http://10.20.30.40/mcp"),
        (["[::1]:9000"], "http://[::1]:9000/mcp"),
        (["::1"], "http://[::1]/mcp"),
        (["localhost"], "http://localhost:9000/mcp"),  # a host name, any port
        (["LOCALHOST:9000"], "http://localhost:9000/mcp"),
    ],
)
async def test_the_allow_list_lets_through(entries: list[str], url: str) -> None:
    await check_url(url, AllowList.parse(entries))


@pytest.mark.parametrize(
    ("entries", "url"),
    [
        (["127.0.0.1:9000"], "http://127.0.0.1:9001/mcp"),  # another port
        (["10.0.0.0/8"], "http://192.168.0.1/mcp"),
        (["localhost:9000"], "http://localhost:9001/mcp"),
        (["mcp.internal"], "http://127.0.0.1/mcp"),  # a name allows that name, not its addresses
    ],
)
async def test_the_allow_list_is_exact(entries: list[str], url: str) -> None:
    with pytest.raises(UrlRefused):
        await check_url(url, AllowList.parse(entries))


@pytest.mark.parametrize("entry", ["", "a..b", "host:port", "1.2.3.4:0", "[::1]:x", "a/b"])
def test_malformed_allow_list_entries(entry: str) -> None:
    with pytest.raises(ValueError):
        AllowList.parse([entry])


async def test_connections_are_pinned_to_the_checked_address(mcp_http_server: HttpMcpServer) -> None:
    """`mcp.test` resolves nowhere: the request still reaches the server at the pinned address,
    carrying the original host name."""
    target = Target(
        f"http://mcp.test:{mcp_http_server.port}/mcp",
        "mcp.test",
        mcp_http_server.port,
        IPv4Address("127.0.0.1"),
    )
    async with httpx2.AsyncClient(transport=PinnedTransport(target)) as client:
        response = await client.get(target.url)
    # The test server guards against DNS rebinding itself, so it refuses the unknown Host, which
    # proves the request got there with the original name.
    assert response.status_code == 421
    async with httpx2.AsyncClient(transport=PinnedTransport(target)) as client:
        with pytest.raises(httpx2.ConnectError, match="not the checked host"):
            await client.get(f"http://127.0.0.1:{mcp_http_server.port}/mcp")
