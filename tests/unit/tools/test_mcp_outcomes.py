"""MCP tool results as the text a model is given back."""

from __future__ import annotations

from mcp_types import (
    BlobResourceContents,
    CallToolResult,
    EmbeddedResource,
    ImageContent,
    ResourceLink,
    TextContent,
    TextResourceContents,
)

from sluicegate.tools.mcp import outcome_of


def test_text_blocks_are_joined_and_other_blocks_described() -> None:
    result = CallToolResult(
        content=[
            TextContent(text="first"),
            ImageContent(data="aGVsbG8h", mime_type="image/png"),
            ResourceLink(uri="file:///notes.md", name="notes"),
            EmbeddedResource(resource=TextResourceContents(uri="file:///a.txt", text="inline text")),
            EmbeddedResource(
                resource=BlobResourceContents(uri="file:///b.bin", blob="AA==", mime_type="x/y")
            ),
            TextContent(text="last"),
        ]
    )
    outcome = outcome_of(result)
    assert outcome.ok
    assert outcome.output == (
        "first\n[image: image/png, 6 bytes]\n[resource link: file:///notes.md (notes)]\n"
        "inline text\n[resource: file:///b.bin, x/y]\nlast"
    )


def test_structured_content_alone_is_given_as_json() -> None:
    assert outcome_of(CallToolResult(content=[], structured_content={"sum": 3})).output == '{"sum":3}'


def test_is_error_results_are_failed_outcomes() -> None:
    outcome = outcome_of(CallToolResult(content=[TextContent(text="no such city")], is_error=True))
    assert (outcome.output, outcome.error) == ("no such city", "no such city")
    empty = outcome_of(CallToolResult(content=[], is_error=True))
    assert empty.error == "the tool reported an error" and empty.output.startswith("Error:")
