"""No SSRF through our server: where a per-request MCP server URL may point.

A request can name an MCP server by URL (Responses `{type: "mcp"}`, LM Studio `ephemeral_mcp`);
without care that is a way to make this server fetch `http://169.254.169.254/` or poke at the
operator's LAN. So: only http(s); the host is resolved first and every address it resolves to
must be public (not loopback, link-local, private, shared, multicast, unspecified or reserved,
IPv4-mapped, 6to4 and NAT64 IPv6 judged as the IPv4 they embed) unless `[tools] allowed_hosts` lists the host name,
the address or its network; and the connection is pinned to the address that was checked (the
URL's host still goes in the Host header and TLS SNI), so a DNS answer that changes between the
check and the connection (DNS rebinding) cannot redirect it (`PinnedTransport`, in pinned.py
with the HTTP client it needs).
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from sluicegate.core.allowlist import AllowList, IPAddress


class UrlRefused(Exception):
    """The URL may not be used; the message says why, for the client."""


NAT64 = ipaddress.IPv6Network("64:ff9b::/96")


def is_public(address: IPAddress) -> bool:
    if isinstance(address, ipaddress.IPv6Address):
        # IPv6 spellings of an IPv4 address are judged as that address.
        embedded = address.ipv4_mapped or address.sixtofour
        if embedded is None and address in NAT64:
            embedded = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
        if embedded is not None:
            return is_public(embedded)
    return address.is_global and not (
        address.is_multicast or address.is_reserved or address.is_unspecified or address.is_link_local
    )


@dataclass(frozen=True, slots=True)
class Target:
    """A checked URL and the address its connections are pinned to."""

    url: str
    host: str
    port: int
    address: IPAddress
    addresses: list[IPAddress] = field(default_factory=list)


async def check_url(url: str, allow: AllowList) -> Target:
    """Resolve the URL's host and check every address; raises UrlRefused."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise UrlRefused(f"the server URL is malformed ({exc})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UrlRefused("the server URL must be an http:// or https:// URL with a host")
    host = parts.hostname
    port = port or (443 if parts.scheme == "https" else 80)
    addresses = await _resolve(host, port)
    if not allow.allows_host(host, port):
        for address in addresses:
            if not is_public(address) and not allow.allows_address(address, port):
                raise UrlRefused(
                    f"the server URL's host {host!r} resolves to {address}, a non-public address; "
                    "the server's operator can allow it with [tools] allowed_hosts"
                )
    return Target(url, host, port, addresses[0], addresses)


async def _resolve(host: str, port: int) -> list[IPAddress]:
    try:
        return [ipaddress.ip_address(host)]
    except ValueError:
        pass
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise UrlRefused(
            f"the server URL's host {host!r} cannot be resolved ({exc.strerror or exc})"
        ) from None
    addresses: list[IPAddress] = []
    for info in infos:
        address = ipaddress.ip_address(str(info[4][0]).split("%")[0])
        if address not in addresses:
            addresses.append(address)
    if not addresses:
        raise UrlRefused(f"the server URL's host {host!r} has no addresses")
    return addresses
