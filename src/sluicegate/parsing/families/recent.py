"""The families added after the first nineteen, tried before them: their fingerprints are
specific, and some templates also contain an older family's marker (MiniMax M3's
`<tool_call>`, Apriel's `<tool_calls>`)."""

from __future__ import annotations

from sluicegate.parsing.families.base import Family
from sluicegate.parsing.families.deepseek_dsml import DEEPSEEK_V3_2, DEEPSEEK_V4
from sluicegate.parsing.families.hy3 import HY3
from sluicegate.parsing.families.json_marked import (
    APRIEL,
    COMMAND_R_PLUS,
    FIREFUNCTION_V2,
    GIGACHAT3,
    GIGACHAT3_1,
)
from sluicegate.parsing.families.kimi_k3 import KIMI_K3
from sluicegate.parsing.families.llama4 import LLAMA4_PYTHONIC
from sluicegate.parsing.families.minicpm5 import MINICPM5
from sluicegate.parsing.families.minimax_m3 import MINIMAX_M3
from sluicegate.parsing.families.muse_glimmer import MUSE_GLIMMER
from sluicegate.parsing.families.solar_minimax_m1 import MINIMAX_M1, SOLAR_OPEN

RECENT: tuple[Family, ...] = (
    DEEPSEEK_V3_2,
    DEEPSEEK_V4,
    KIMI_K3,
    MINIMAX_M3,
    MINICPM5,
    GIGACHAT3,
    GIGACHAT3_1,
    APRIEL,
    COMMAND_R_PLUS,
    FIREFUNCTION_V2,
    HY3,
    MUSE_GLIMMER,
    SOLAR_OPEN,
    MINIMAX_M1,
    LLAMA4_PYTHONIC,
)
