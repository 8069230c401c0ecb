"""What happens when a conversation does not fit the loaded context.

By default nothing is dropped: the request is refused (400, `context_length_exceeded`, naming
both numbers) before anything streams, because a silent cut is the worst surprise for an agent.
A model's config or a request can opt into LM Studio's policies instead:

- `rolling_window`: drop the oldest turns;
- `truncate_middle`: keep the first turn after the system prompt (the task, usually) and drop
  the ones after it.

Both always keep the system prompt and the last user turn with everything after it (its tool
calls and results), drop whole turns (a user message with the replies, tool calls and results
that answer it, so the rest still alternates and no result loses its call), and leave room
for the answer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from sluicegate.core.errors import invalid
from sluicegate.core.request import Message

Policy = Literal["error", "rolling_window", "truncate_middle"]
POLICIES: tuple[Policy, ...] = ("error", "rolling_window", "truncate_middle")
TRUNCATED_HEADER = "X-Sluicegate-Context-Truncated"


def policy_value(value: object, param: str) -> Policy:
    for policy in POLICIES:
        if value == policy:
            return policy
    raise invalid(
        f"Invalid value for '{param}': expected one of {', '.join(POLICIES)}; got {value!r}.", param=param
    )


def answer_room(n_ctx: int, max_tokens: int | None) -> int:
    """Tokens a trimmed prompt leaves for the answer: `max_tokens`, or an eighth of the context,
    never more than half of it."""
    return min(max_tokens or n_ctx // 8, n_ctx // 2)


def too_long(tokens: int, n_ctx: int, model_id: str, param: str = "messages") -> Exception:
    return invalid(
        f"The prompt ({tokens} tokens) exceeds the available context size ({n_ctx} tokens) of "
        f"model {model_id!r}. Shorten the conversation, or set context_overflow to "
        f"'rolling_window' or 'truncate_middle' to drop old turns.",
        param=param,
        code="context_length_exceeded",
        details={"n_prompt_tokens": tokens, "n_ctx": n_ctx},
    )


def _turns(messages: list[Message], start: int, end: int) -> list[list[int]]:
    """Indices of messages[start:end] in whole turns: a user message and what answers it (the
    assistant's reply, its tool calls and their results), so what is kept still alternates."""
    turns: list[list[int]] = []
    for index in range(start, end):
        if messages[index].role == "user" or not turns:
            turns.append([index])
        else:
            turns[-1].append(index)
    return turns


@dataclass(frozen=True, slots=True)
class Fitted:
    messages: list[Message]
    dropped: int  # messages left out
    tokens: list[int]


def fit(
    messages: list[Message],
    policy: Policy,
    budget: int,
    count: Callable[[list[Message]], list[int]],
) -> Fitted | None:
    """The fewest turns dropped by `policy` so that `count(messages)` fits `budget` tokens;
    None when even the system prompt and the last user turn do not fit."""
    head = 0
    while head < len(messages) and messages[head].role in ("system", "developer"):
        head += 1
    last_user = max((i for i, m in enumerate(messages) if m.role == "user"), default=len(messages))
    turns = _turns(messages, head, last_user)
    if policy == "truncate_middle":
        turns = turns[1:]  # the first turn stays: it usually states the task

    def kept(n: int) -> list[Message]:
        gone = {i for turn in turns[:n] for i in turn}
        return [m for i, m in enumerate(messages) if i not in gone]

    # Binary search on the number of turns dropped: fewer messages never take more tokens.
    low, high = 1, len(turns)
    best: Fitted | None = None
    while low <= high:
        middle = (low + high) // 2
        candidate = kept(middle)
        tokens = count(candidate)
        if len(tokens) <= budget:
            best = Fitted(candidate, len(messages) - len(candidate), tokens)
            high = middle - 1
        else:
            low = middle + 1
    return best
