"""Muse Glimmer: messages addressed ` to=RECIPIENT<|message|>…`, ended by `<|eom|>` (more
follow) or `<|eot|>`; the generation prompt is `<|start|>assistant`, so the output is read as
following it (a header only opens a message). `to=self` is reasoning,
`to=user` the answer, any other recipient a call in ATEM markup:

 to=self<|message|>Let me look.<|eom|><|start|>assistant to=get_weather<|message|><atem:function_calls>
<atem:invoke name="get_weather">
<atem:parameter name="city">Paris</atem:parameter>
</atem:invoke>
</atem:function_calls><|eom|>
"""

from __future__ import annotations

from sluicegate.parsing.families.base import Family, has, markup_family
from sluicegate.parsing.forced import params_call
from sluicegate.parsing.formats import ReasoningStyle
from sluicegate.parsing.markup import CallOut, Markup
from sluicegate.parsing.readers import XmlCall, XmlCallReader

MESSAGE = "<|message|>"

ATEM_XML = XmlCall(
    name_end=('">',),
    key_open='<atem:parameter name="',
    key_close='">',
    value_close="</atem:parameter>",
    call_close="</atem:invoke>",
)


START = "<|start|>assistant"  # the generation prompt's end: the output is read as following it


class Recipient:
    """` to=RECIPIENT<|message|>` at a message's start: read past (the invoke that follows names
    the call). A line break before `<|message|>` means it was no header: the text goes back."""

    def __init__(self) -> None:
        self._buf = ""

    def feed(self, text: str, out: CallOut) -> str | None:
        self._buf += text
        i = self._buf.find(MESSAGE)
        if i != -1:
            return self._buf[i + len(MESSAGE) :]
        return " to=" + self._buf if "\n" in self._buf else None  # (no marker without START)

    def close(self, out: CallOut) -> None:
        pass  # cut off inside a header: markup, nothing said


MUSE_GLIMMER = Family(
    "muse_glimmer",
    has("<atem:function_calls>", "<|eom|>"),
    markup_family(
        Markup(
            calls=(
                (f"{START} to=", lambda tools: Recipient()),
                ('<atem:invoke name="', lambda tools: XmlCallReader(ATEM_XML, tools)),
            ),
            drop=(START, "<atem:function_calls>", "</atem:function_calls>", "<|eom|>", "<|eot|>"),
            starts_with=START,
        )
    ),
    reasoning=ReasoningStyle(f"{START} to=self{MESSAGE}", "<|eom|>"),
    templates=("muse-glimmer.jinja",),
    reasoning_built=True,
    call=params_call(
        lambda n: f' to={n}<|message|><atem:function_calls>\n<atem:invoke name="{n}">\n',
        lambda k: (f'<atem:parameter name="{k}">', "</atem:parameter>\n"),
        "</atem:invoke>\n</atem:function_calls>",
    ),
)
