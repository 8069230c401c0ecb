"""Conversation state, dialect-neutral: stored turns, items ↔ messages, approvals, background runs.

Every stateful dialect (Responses, LM Studio chats) keeps its turns here in one shape (Responses
items, the richest), so a conversation started in one dialect continues in another.
"""
