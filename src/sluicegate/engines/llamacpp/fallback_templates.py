"""Chat templates for a GGUF that carries none.

A fine-tuned (chat) model gets its architecture's format: llama.cpp's built-in template of that
name (`src/llama-chat.cpp`, `llm_chat_apply_template`) written in Jinja (here, or in the
declaration of the family whose markup it writes, `Family.fallback`), so it renders what
llama.cpp's would (the tests hold them to llama.cpp's stated renderings); an architecture not
listed gets ChatML, which is what llama-server falls back to for any model without a template.

A base (pretrained-only) model has never seen turn markers: Gemma 3 270M answers a Gemma-format
question by repeating it. It gets a plain question-and-answer transcript instead, which base
models continue as an answer, with a stop string where they would start the next question.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sluicegate.parsing import FAMILIES

CHATML = """\
{%- for message in messages -%}
{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"""

# google/gemma-7b-it and later: no system turn (it goes before the first user text), the
# assistant is "model", every text trimmed.
GEMMA = """\
{%- set ns = namespace(system='') -%}
{%- for message in messages -%}
{%- if message.role == 'system' -%}
{%- set ns.system = ns.system + (message.content | trim) -%}
{%- else -%}
{%- set role = 'model' if message.role == 'assistant' else message.role -%}
{{- '<start_of_turn>' + role + '\\n' -}}
{%- if ns.system and role != 'model' -%}
{{- ns.system + '\\n\\n' -}}
{%- set ns.system = '' -%}
{%- endif -%}
{{- (message.content | trim) + '<end_of_turn>\\n' -}}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<start_of_turn>model\\n' -}}{%- endif -%}"""

LLAMA3 = """\
{%- for message in messages -%}
{{- '<|start_header_id|>' + message.role + '<|end_header_id|>\\n\\n' + (message.content | trim) + '<|eot_id|>' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}{%- endif -%}"""

PHI3 = """\
{%- for message in messages -%}
{{- '<|' + message.role + '|>\\n' + message.content + '<|end|>\\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|assistant|>\\n' -}}{%- endif -%}"""

# Mistral's "v7" format (Mistral Large 2411, Small 3.x).
MISTRAL_V7 = """\
{%- for message in messages -%}
{%- if message.role == 'system' -%}
{{- '[SYSTEM_PROMPT] ' + message.content + '[/SYSTEM_PROMPT]' -}}
{%- elif message.role == 'user' -%}
{{- '[INST] ' + message.content + '[/INST]' -}}
{%- else -%}
{{- ' ' + message.content + '</s>' -}}
{%- endif -%}
{%- endfor -%}"""

# A base model's conversation as text it continues naturally.
TRANSCRIPT = """\
{%- for message in messages -%}
{%- if message.role == 'system' -%}
{{- (message.content | trim) + '\\n\\n' -}}
{%- elif message.role == 'assistant' -%}
{{- 'Answer: ' + (message.content | trim) + '\\n' -}}
{%- else -%}
{{- 'Question: ' + (message.content | trim) + '\\n' -}}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- 'Answer:' -}}{%- endif -%}"""
TRANSCRIPT_STOPS = ("\nQuestion:", "\nAnswer:")

# CohereForAI/c4ai-command-r-plus (llama.cpp's "command-r"): each text trimmed.
COMMAND_R = """\
{%- set roles = {'system': 'SYSTEM', 'user': 'USER', 'assistant': 'CHATBOT'} -%}
{%- for message in messages if message.role in roles -%}
{{- '<|START_OF_TURN_TOKEN|><|' + roles[message.role] + '_TOKEN|>' + (message.content | trim) + '<|END_OF_TURN_TOKEN|>' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>' -}}{%- endif -%}"""

# llama.cpp's built-in templates by name: these, and those a family declares (`Family.fallback`).
# A config's `chat_template` may name one (llama-server's `--chat-template chatml`).
BUILTIN = {
    "chatml": CHATML,
    "command-r": COMMAND_R,
    "gemma": GEMMA,
    "llama3": LLAMA3,
    "phi3": PHI3,
    "mistral-v7": MISTRAL_V7,
    **{f.fallback.name: f.fallback.source for f in FAMILIES if f.fallback is not None},
}

# GGUF `general.architecture` → llama.cpp's built-in template name.
_BY_ARCHITECTURE = {
    "gemma": "gemma",
    "gemma2": "gemma",
    "gemma3": "gemma",
    "gemma3n": "gemma",
    "gemma-embedding": "gemma",
    "llama": "llama3",
    "phi3": "phi3",
    "phimoe": "phi3",
    "mistral3": "mistral-v7",
    **{
        arch: f.fallback.name for f in FAMILIES if f.fallback is not None for arch in f.fallback.architectures
    },
}


@dataclass(frozen=True, slots=True)
class Fallback:
    name: str
    source: str
    stops: tuple[str, ...] = field(default=())


def fallback_name(architecture: str) -> str:
    """The built-in template llama.cpp's formats give this architecture; ChatML otherwise."""
    return _BY_ARCHITECTURE.get(architecture, "chatml")


def fallback_template(architecture: str, *, base_model: bool = False) -> Fallback:
    if base_model:
        return Fallback("transcript", TRANSCRIPT, TRANSCRIPT_STOPS)
    name = fallback_name(architecture)
    return Fallback(name, BUILTIN[name])
