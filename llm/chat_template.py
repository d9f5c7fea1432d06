"""The project's chat format (`llm.chat.ChatFormat`) as a Jinja chat template, for tokenizers and servers.

Training renders prompts with `ChatFormat.prompt_ids` (tool signatures in the system message, the call
format, tool results as `tool` turns or `<tool_response>` blocks), not with the model's own template, which
for SmolLM2 knows nothing about tools. A checkpoint therefore saves this template as its chat template
(`rl.checkpoint.save_checkpoint`), and `coevolve engine serve` passes it to vLLM (`--chat-template`), so
that `tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=True)`, in transformers or
behind a server's chat endpoint, gives exactly the prompt the policy was trained on: a leading system
message replaces the default instructions, the tools follow, then the turns and the generation prompt.
Demonstrations are ordinary turns placed before the conversation.

The template starts with a marker naming its settings, so a `ChatFormat` built on a saved tokenizer
renders tool results the way the original did (`saved_settings`).

    tokenizer.chat_template = ChatFormat(tokenizer).template()
"""

from __future__ import annotations

import json
import re

MARKER = "coevolve chat format"
_SETTINGS = re.compile(r"\{#- " + MARKER + r" (\{.*?\}) -#\}")

_BODY = r"""
{%- set START = '<|im_start|>' -%}{%- set END = '<|im_end|>' -%}
{%- macro type_of(s) -%}
  {%- if s['enum'] is defined -%}
    {%- for v in s['enum'] -%}{{ v | tojson(ensure_ascii=true) }}{{ ' | ' if not loop.last }}{%- endfor -%}
  {%- elif s['type'] is defined and s['type'] is not string and s['type'] is iterable -%}
    {{- s['type'] | join(' | ') -}}
  {%- elif s['type'] is defined and s['type'] == 'array' and s['items'] is mapping -%}
    {{- type_of(s['items']) }}[]
  {%- else -%}{{ s['type'] if s['type'] is defined else 'any' }}{%- endif -%}
{%- endmacro -%}
{%- macro content_of(m) -%}
  {%- if m['content'] is not defined or m['content'] is none -%}
  {%- elif m['content'] is string -%}{{ m['content'] }}
  {%- else -%}{{ m['content'] | tojson(ensure_ascii=true) }}{%- endif -%}
{%- endmacro -%}
{%- macro describe(tool) -%}
  {%- set spec = tool['function'] if tool['function'] is defined else tool -%}
  {%- set params = spec['parameters'] if spec['parameters'] is defined and spec['parameters'] else {} -%}
  {%- set props = params['properties'] if params['properties'] is defined and params['properties'] else {} -%}
  {%- set required = params['required'] if params['required'] is defined and params['required'] else [] -%}
  {{- spec['name'] }}(
  {%- for name, s in props.items() -%}
    {{ name }}{{ '' if name in required else '?' }}: {{ type_of(s) }}{{ ', ' if not loop.last }}
  {%- endfor -%})
  {%- set lines = ((spec['description'] if spec['description'] is defined and spec['description'] else '') | trim).splitlines() -%}
  {%- if lines %} - {{ lines[0] }}{% endif -%}
  {%- if param_descriptions -%}
    {%- for name, s in props.items() if s['description'] is defined and s['description'] -%}
      {{ '\n    ' ~ name ~ ': ' ~ (s['description'] | trim) }}
    {%- endfor -%}
  {%- endif -%}
{%- endmacro -%}
{%- macro assistant_text(m) -%}
  {%- set out = namespace(text=content_of(m)) -%}
  {%- for call in (m['tool_calls'] if m['tool_calls'] is defined and m['tool_calls'] else []) -%}
    {%- set fn = call['function'] if call['function'] is defined else call -%}
    {%- set args = fn['arguments'] if fn['arguments'] is defined else {} -%}
    {%- if args is string -%}
      {%- set body = '{"name": ' ~ (fn['name'] | tojson(ensure_ascii=true)) ~ ', "arguments": ' ~ args ~ '}' -%}
    {%- else -%}
      {%- set body = {'name': fn['name'], 'arguments': args} | tojson(ensure_ascii=true) -%}
    {%- endif -%}
    {%- set out.text = out.text ~ ('\n' if out.text else '') ~ '<tool_call>\n' ~ body ~ '\n</tool_call>' -%}
  {%- endfor -%}
  {{- out.text -}}
{%- endmacro -%}
{%- if messages and messages[0]['role'] == 'system' -%}
  {%- set head = content_of(messages[0]) -%}{%- set turns = messages[1:] -%}
{%- else -%}
  {%- set head = default_instructions -%}{%- set turns = messages -%}
{%- endif -%}
{{- START }}system
{{ head }}
{%- if tools -%}
  {{- '\n\nYou can call these tools:\n' -}}
  {%- for tool in tools -%}{{ describe(tool) }}{{ '\n' if not loop.last }}{%- endfor -%}
  {{- '\n\n' ~ call_format -}}
{%- endif -%}
{{ END }}
{% for m in turns -%}
  {%- set role = m['role'] -%}
  {%- if role not in ['user', 'assistant', 'tool'] -%}
    {{- raise_exception('unsupported message role ' ~ role ~ ' here (expected user, assistant or tool)') -}}
  {%- endif -%}
  {%- set previous = turns[loop.index0 - 1]['role'] if not loop.first else '' -%}
  {%- set following = turns[loop.index0 + 1]['role'] if not loop.last else '' -%}
  {%- if role == 'tool' and wrap_tool_results -%}
    {{- (START ~ 'user\n') if previous != 'tool' else '\n' -}}
    {{- '<tool_response>\n' ~ content_of(m) ~ '\n</tool_response>' -}}
    {{- (END ~ '\n') if following != 'tool' -}}
  {%- else -%}
    {{- START ~ role ~ '\n' ~ (assistant_text(m) if role == 'assistant' else content_of(m)) ~ END ~ '\n' -}}
  {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{ START }}assistant
{% endif -%}
"""


def chat_template(*, default_instructions: str, call_format: str, wrap_tool_results: bool,
                  param_descriptions: bool = False) -> str:
    """The Jinja template that renders what `ChatFormat` with these settings renders (`ChatFormat.template`
    passes its system-message text)."""
    settings = {"wrap_tool_results": wrap_tool_results, "param_descriptions": param_descriptions}
    values = {**settings, "default_instructions": default_instructions, "call_format": call_format}
    lines = [f"{{%- set {name} = {json.dumps(value)} -%}}" for name, value in values.items()]
    return f"{{#- {MARKER} {json.dumps(settings)} -#}}\n" + "\n".join(lines) + _BODY


def saved_settings(template: str | None) -> dict | None:
    """The settings of a template `chat_template` wrote (a saved checkpoint's), else None."""
    found = _SETTINGS.match(template or "")
    return json.loads(found.group(1)) if found else None
