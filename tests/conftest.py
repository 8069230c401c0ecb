"""Shared by every test folder; its presence puts `tests/` on `sys.path`, so tests can import
shared helpers such as `mcp_fixtures` (the real MCP test servers) by name."""
