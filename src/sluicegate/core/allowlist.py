"""`[tools] allowed_hosts`: the hosts an operator lets the server reach although they are not
public. A value of the configuration (parsed and checked at startup), read by the SSRF guard."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True, slots=True)
class AllowList:
    """`[tools] allowed_hosts`: host names, addresses or networks, each optionally with a port."""

    hosts: frozenset[tuple[str, int | None]] = frozenset()
    networks: tuple[tuple[IPNetwork, int | None], ...] = ()

    @classmethod
    def parse(cls, entries: list[str]) -> AllowList:
        """Raises ValueError naming a malformed entry."""
        hosts: set[tuple[str, int | None]] = set()
        networks: list[tuple[IPNetwork, int | None]] = []
        for entry in entries:
            host, port = _split_host_port(entry.strip())
            try:
                networks.append((ipaddress.ip_network(host, strict=False), port))
            except ValueError:
                if not host or "/" in host or not all(part for part in host.split(".")):
                    raise ValueError(f"not a host name, address or network: {entry!r}") from None
                hosts.add((host.lower().rstrip("."), port))
        return cls(frozenset(hosts), tuple(networks))

    def allows_host(self, host: str, port: int) -> bool:
        host = host.lower().rstrip(".")
        return (host, None) in self.hosts or (host, port) in self.hosts

    def allows_address(self, address: IPAddress, port: int) -> bool:
        return any(address in net and allowed in (None, port) for net, allowed in self.networks)


def _split_host_port(entry: str) -> tuple[str, int | None]:
    if entry.startswith("["):  # [v6]:port
        host, _, rest = entry[1:].partition("]")
        return host, _port(rest[1:], entry) if rest.startswith(":") else None
    if entry.count(":") == 1:
        host, _, port = entry.partition(":")
        return host, _port(port, entry)
    return entry, None


def _port(text: str, entry: str) -> int:
    if not (text.isascii() and text.isdigit()) or not 0 < int(text) < 65536:
        raise ValueError(f"bad port in {entry!r}")
    return int(text)
