"""The HTTP transport of a URL the SSRF guard checked (tools/ssrf.py): its connections go to the
address that was checked. Its own module so that the HTTP client (httpx2, ~3 MiB of RSS) is
imported by what fetches (an MCP server, an image URL), not by every server that may check a URL.
"""

from __future__ import annotations

import httpx2

from sluicegate.tools.ssrf import Target


class PinnedTransport(httpx2.AsyncHTTPTransport):
    """Connects to the checked address whatever DNS says later; refuses any other host (a
    redirect to another origin never gets this far, the SDK does not follow those)."""

    def __init__(self, target: Target) -> None:
        super().__init__()
        self.target = target

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        if request.url.host.lower() != self.target.host.lower() or (request.url.port or 0) not in (
            0,
            self.target.port,
        ):
            raise httpx2.ConnectError(f"refused: {request.url.host} is not the checked host", request=request)
        request.url = request.url.copy_with(host=str(self.target.address))
        request.extensions = {**request.extensions, "sni_hostname": self.target.host}
        return await super().handle_async_request(request)
