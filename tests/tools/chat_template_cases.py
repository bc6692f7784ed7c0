"""Chat-template fixture inputs: conversations for the real templates, and small templates that each
exercise one corner of the Jinja subset HF chat templates use. make_tokenizer_fixtures.py renders
them with jinja2 configured as transformers configures it and stores the outputs."""

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "  Get the current weather for a city.\n",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "城市名称 (city name)"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                "days": {"type": "integer", "minimum": 1, "maximum": 7.5},
            },
            "required": ["city"],
        },
    },
}
SEARCH_TOOL = {
    "type": "function",
    "function": {
        "name": "web_search",
        "description": None,
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}, "top_k": {"type": "integer", "default": 5}}},
    },
}


def tool_call(name, arguments):
    return {"type": "function", "function": {"name": name, "arguments": arguments}}


def conversations():
    """(name, messages, tools) triples covering what the DeepSeek templates branch on."""
    sys_prompt = {"role": "system", "content": "You are a helpful assistant."}
    return [
        ("single_user", [{"role": "user", "content": "Hello!"}], None),
        ("system_user", [sys_prompt, {"role": "user", "content": "What is MLA?"}], None),
        ("two_systems", [sys_prompt, {"role": "system", "content": "Answer in Chinese."},
                         {"role": "user", "content": "Hi"}], None),
        ("multi_turn", [sys_prompt, {"role": "user", "content": "1+1?"},
                        {"role": "assistant", "content": "2"},
                        {"role": "user", "content": "And 2+2?"},
                        {"role": "assistant", "content": "4"},
                        {"role": "user", "content": "谢谢！😀"}], None),
        ("assistant_last", [{"role": "user", "content": "Say hi"}, {"role": "assistant", "content": "Hi!"}], None),
        ("reasoning_in_history", [{"role": "user", "content": "Why?"},
                                  {"role": "assistant", "content": "<think>\nLet me think.\n</think>\n\nBecause."},
                                  {"role": "user", "content": "OK"}], None),
        ("one_tool_call", [sys_prompt, {"role": "user", "content": "Weather in Beijing?"},
                           {"role": "assistant", "content": None,
                            "tool_calls": [tool_call("get_weather", '{"city": "北京"}')]},
                           {"role": "tool", "content": '{"temp": 21, "sky": "sunny"}'},
                           {"role": "assistant", "content": "It is 21°C and sunny in Beijing."}], [WEATHER_TOOL]),
        ("two_tool_calls", [{"role": "user", "content": "Weather in Paris and Tokyo?"},
                            {"role": "assistant", "content": None,
                             "tool_calls": [tool_call("get_weather", '{"city": "Paris"}'),
                                            tool_call("get_weather", '{"city": "Tokyo", "unit": "celsius"}')]},
                            {"role": "tool", "content": "18"},
                            {"role": "tool", "content": "25"},
                            {"role": "assistant", "content": "Paris 18, Tokyo 25."},
                            {"role": "user", "content": "Thanks"}], [WEATHER_TOOL, SEARCH_TOOL]),
        ("tool_output_last", [{"role": "user", "content": "Search it"},
                              {"role": "assistant", "content": None,
                               "tool_calls": [tool_call("web_search", '{"query": "DeepSeek V3"}')]},
                              {"role": "tool", "content": "result 1\nresult 2"}], [SEARCH_TOOL]),
        ("three_tool_calls_twice", [{"role": "user", "content": "a"},
                                    {"role": "assistant", "content": None,
                                     "tool_calls": [tool_call("f", "{}"), tool_call("g", '{"x": 1}'), tool_call("h", "[]")]},
                                    {"role": "tool", "content": "1"}, {"role": "tool", "content": "2"},
                                    {"role": "tool", "content": "3"},
                                    {"role": "assistant", "content": "done"},
                                    {"role": "user", "content": "again"},
                                    {"role": "assistant", "content": None,
                                     "tool_calls": [tool_call("f", '{"again": true}')]},
                                    {"role": "tool", "content": "4"}], None),
        ("special_text", [{"role": "user", "content": "Literal <｜User｜> and {{ braces }} and {% tags %}"}], None),
        ("empty_content", [{"role": "system", "content": ""}, {"role": "user", "content": ""}], None),
        ("whitespace_content", [{"role": "user", "content": "  \n\tindented\n\n"},
                                {"role": "assistant", "content": "\n"}], None),
        ("unicode", [{"role": "user", "content": "こんにちは 안녕 مرحبا 👨‍👩‍👧‍👦 \u200b\u00a0"}], None),
    ]


R1_EXTRA = [
    ("tool_call_with_content", [{"role": "user", "content": "Find it"},
                                {"role": "assistant", "content": "Let me search.",
                                 "tool_calls": [tool_call("web_search", {"query": "mla", "top_k": 3})]},
                                {"role": "tool", "content": "ok"}], [SEARCH_TOOL]),
    ("bad_role", [{"role": "narrator", "content": "x"}], None),
]


# Small templates, each on one feature: (name, source, variables).
FEATURES = [
    ("loop_variables", "{% for x in items %}{{ loop.index }}/{{ loop.index0 }}/{{ loop.revindex }}/{{ loop.revindex0 }}/{{ loop.first }}/{{ loop.last }}/{{ loop.length }};{% endfor %}", {"items": ["a", "b", "c"]}),
    ("loop_prev_next_cycle", "{% for x in items %}[{{ loop.previtem }}|{{ x }}|{{ loop.nextitem }}|{{ loop.cycle('odd', 'even') }}]{% endfor %}", {"items": [1, 2, 3]}),
    ("loop_else", "{% for x in items %}{{ x }}{% else %}empty{% endfor %}|{% for x in none_list %}{{ x }}{% else %}nothing{% endfor %}", {"items": [], "none_list": []}),
    ("loop_filter", "{% for m in messages if m.role != 'system' %}{{ loop.index }}:{{ m.role }}{% if not loop.last %},{% endif %}{% endfor %}", {"messages": [{"role": "system"}, {"role": "user"}, {"role": "assistant"}]}),
    ("loop_break_continue", "{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i > 5 %}{% break %}{% endif %}{{ i }}{% endfor %}", {}),
    ("loop_unpack", "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{% for a, b in [[1, 2], (3, 4)] %}{{ a + b }}{% endfor %}", {"d": {"x": 1, "y": [1, 2], "z": None}}),
    ("loop_dict_and_string", "{% for k in d %}{{ k }}{% endfor %}|{% for c in 'héllo' %}{{ c }}.{% endfor %}", {"d": {"b": 1, "a": 2}}),
    ("loop_scoping", "{% set x = 0 %}{% for i in [1, 2, 3] %}[{{ x }}]{% set x = i %}({{ x }}){% endfor %}{{ x }}", {}),
    ("namespace_counter", "{% set ns = namespace(count=0, names=[]) %}{% for m in messages %}{% set ns.count = ns.count + 1 %}{% set ns.names = ns.names + [m.role] %}{% endfor %}{{ ns.count }} {{ ns.names }} {{ ns }}", {"messages": [{"role": "user"}, {"role": "assistant"}]}),
    ("if_elif_else", "{% for v in values %}{% if v is none %}N{% elif v is string %}S{% elif v is mapping %}M{% elif v is iterable %}I{% elif v is number %}#{% else %}?{% endif %}{% endfor %}", {"values": [None, "s", {"a": 1}, [1], 3, 2.5, True]}),
    ("tests", "{{ x is defined }} {{ y is defined }} {{ y is undefined }} {{ 3 is odd }} {{ 4 is even }} {{ 9 is divisibleby 3 }} {{ 'a' is lower }} {{ 'A' is upper }} {{ 1 is integer }} {{ 1.0 is float }} {{ true is boolean }} {{ none is none }} {{ 'x' is in 'xyz' }} {{ 2 is eq 2 }} {{ 3 is gt 2 }} {{ x is sameas 5 }} {{ x is not sameas 6 }}", {"x": 5}),
    ("set_multiple_and_block", "{% set a, b = 1, 'two' %}{{ a }}{{ b }}{% set block %}  inner {{ a }}  {% endset %}[{{ block }}]{% set t %}X{% endset %}{{ t | lower }}", {}),
    ("set_block_filter", "{% set text | trim | upper %}\n   hello world   \n{% endset %}[{{ text }}]", {}),
    ("macro", "{% macro greet(name, greeting='Hello', punct='!') %}{{ greeting }}, {{ name }}{{ punct }}{% endmacro %}{{ greet('Ann') }} {{ greet('Bob', 'Hi') }} {{ greet(name='Cy', punct='?') }}", {}),
    ("macro_sees_globals", "{% macro show() %}{{ value }}-{{ later }}{% endmacro %}{% set later = 'L' %}{{ show() }}", {"value": 7}),
    ("call_block", "{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}{% call wrap('b') %}bold {{ 1 + 1 }}{% endcall %}", {}),
    ("filter_block", "{% filter upper %}shout {{ word }}{% endfilter %}", {"word": "this"}),
    ("with_block", "{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}{{ a }}", {}),
    ("arithmetic", "{{ 7 + 3 }} {{ 7 - 10 }} {{ 7 * 3 }} {{ 7 / 2 }} {{ 8 / 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7.5 % 2 }} {{ 2 ** 10 }} {{ 2 ** -1 }} {{ 1.5 * 2 }} {{ 0.1 + 0.2 }} {{ 1e20 }} {{ 1e-7 }} {{ 123456789.0 }} {{ -0.0 }} {{ 10 ** 16 * 1.0 }}", {}),
    ("comparisons", "{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 1 == 1.0 }} {{ 'a' < 'b' }} {{ [1, 2] < [1, 3] }} {{ 'b' in 'abc' }} {{ 'z' not in 'abc' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 1 != 2 }} {{ true == 1 }}", {}),
    ("logic_returns_operands", "{{ '' or 'default' }} {{ 'a' and 'b' }} {{ 0 or none }} {{ not [] }} {{ x or 'unset' }}|{{ 'yes' if flag else 'no' }}|{{ 'only if' if flag }}|", {"flag": False}),
    ("printing_values", "{{ none }} {{ true }} {{ [1, 'a', none, true, 1.5, [2]] }} {{ {'k': 'v', 'n': 1} }} {{ (1,) }} {{ (1, 'b') }} {{ \"it's\" }} {{ ['it\\'s', 'say \"hi\"', 'both \\' \"'] }} {{ ['tab\\tnl\\n', 'é', '\\x00\\x7f'] }} {{ missing }}|", {}),
    ("string_methods", "{{ '  pad  '.strip() }}|{{ 'xxhixx'.strip('x') }}|{{ '  l'.lstrip() }}|{{ 'r  '.rstrip() }}|{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}|{{ 'a b c'.split(' ', 1) }}|{{ 'a b c'.rsplit(' ', 1) }}|{{ 'Hello'.upper() }}{{ 'Hello'.lower() }}|{{ 'hello world'.title() }}|{{ 'hELLO'.capitalize() }}|{{ 'aaa'.replace('a', 'b', 2) }}|{{ 'abc'.startswith('a') }}{{ 'abc'.endswith(('x', 'c')) }}|{{ 'abcabc'.find('c') }}{{ 'abcabc'.rfind('c') }}{{ 'abcabc'.count('bc') }}|{{ '-'.join(['x', 'y']) }}|{{ 'l1\\nl2\\r\\nl3'.splitlines() }}|{{ '{} and {name}'.format(1, name='n') }}", {}),
    ("slicing", "{{ s[1:] }}|{{ s[:-1] }}|{{ s[::-1] }}|{{ s[1:4:2] }}|{{ s[-2] }}|{{ items[1:] }}|{{ items[::-1] }}|{{ items[-1] }}|{{ items[10] }}|{{ t[1:] }}", {"s": "héllo wörld", "items": [1, 2, 3], "t": ["x", "y"]}),
    ("dict_access", "{{ d.a }} {{ d['a'] }} {{ d.get('b') }} {{ d.get('b', 'dflt') }} {{ d.missing }}|{{ d['missing'] is defined }} {{ d.keys() | list }} {{ d.values() | list }} {{ d.items() | list }} {{ d.nested.inner }} {{ l.0 }}", {"d": {"a": 1, "nested": {"inner": "deep"}}, "l": ["zero"]}),
    ("filters_text", "{{ '  x  ' | trim }}|{{ 'xxAxx' | trim('x') }}|{{ 'abc' | upper }}|{{ 'ABC' | lower }}|{{ 'hello world' | title }}|{{ 'hello' | capitalize }}|{{ 'a-b-c' | replace('-', '+') }}|{{ 'héllo' | length }}|{{ 'abc' | reverse }}|{{ 'abc' | first }}{{ 'abc' | last }}|{{ 42 | string }}|{{ '<a & b>' | e }}|{{ 'hi' | center(8) }}|{{ 'one two  three' | wordcount }}", {}),
    ("filters_lists", "{{ [3, 1, 2] | sort }}|{{ ['b', 'A', 'c'] | sort }}|{{ ['b', 'A', 'c'] | sort(case_sensitive=true) }}|{{ [3, 1, 2] | sort(reverse=true) }}|{{ [1, 2, 1, 3] | unique | list }}|{{ [1, 2, 3] | reverse | list }}|{{ [1, 2, 3] | first }}{{ [1, 2, 3] | last }}|{{ [1, 2, 3] | length }}{{ [1, 2, 3] | count }}|{{ [1, 2, 3] | sum }}|{{ [1, 5, 2] | max }}{{ [4, 2, 9] | min }}|{{ ['a', 'b'] | join }}|{{ [1, 2] | join(', ') }}|{{ [1, 2, 3, 4, 5] | batch(2) | list }}|{{ range(3) | list }}|{{ range(1, 10, 4) | list }}", {}),
    ("filters_attributes", "{{ users | map(attribute='name') | join(',') }}|{{ users | selectattr('admin') | map(attribute='name') | list }}|{{ users | rejectattr('admin') | map(attribute='name') | list }}|{{ users | selectattr('age', 'gt', 30) | map(attribute='name') | list }}|{{ users | sort(attribute='age') | map(attribute='name') | list }}|{{ users | sum(attribute='age') }}|{{ [1, 2, 3, 4] | select('odd') | list }}|{{ [1, 2, 3, 4] | reject('odd') | list }}|{{ ['a', 'bb'] | map('upper') | list }}|{{ users | map(attribute='missing', default='?') | list }}", {"users": [{"name": "ann", "age": 40, "admin": True}, {"name": "bob", "age": 25, "admin": False}, {"name": "cy", "age": 31, "admin": False}]}),
    ("filters_default_and_numbers", "{{ missing | default('dflt') }}|{{ '' | default('empty', true) }}|{{ none | default('kept') }}|{{ '42' | int }}|{{ '4.7' | int }}|{{ 'x' | int(7) }}|{{ 3.9 | int }}|{{ '2.5' | float }}|{{ 3 | float }}|{{ -3 | abs }}|{{ 2.567 | round(2) }}|{{ 2.5 | round }}|{{ 3.5 | round }}|{{ 2.1 | round(method='ceil') }}|{{ {'b': 1, 'a': 2} | dictsort }}|{{ {'a': 1} | items | list }}", {}),
    ("filter_indent", "[{{ text | indent }}]\n[{{ text | indent(2, true) }}]\n[{{ text | indent('> ', first=true, blank=true) }}]", {"text": "line one\n\nline three\n"}),
    ("tojson", "{{ data | tojson }}\n{{ data | tojson(indent=2) }}\n{{ data | tojson(sort_keys=true) }}\n{{ data | tojson(separators=(',', ':')) }}\n{{ data | tojson(ensure_ascii=true) }}\n{{ 'quote \" backslash \\\\ tab \\t nl \\n ctrl \\x01' | tojson }}\n{{ [] | tojson }} {{ {} | tojson(indent=4) }} {{ [1.0, 2.5e-7, 1e22, -0.0] | tojson }}", {"data": {"z": 1, "a": [True, None, 1.5, "中文 😀"], "nested": {"k": {}, "l": []}}}),
    ("string_concat_and_tilde", "{{ 'a' + 'b' }} {{ 'a' ~ 1 ~ none ~ missing ~ [1] }} {{ [1] + [2] }} {{ 'ab' * 3 }} {{ 'x' 'y' }} {{ \"%s=%d\" % ('n', 5) }} {{ '%.2f' % 3.14159 }} {{ '%s' | format('f') }}", {}),
    ("string_escapes", "{{ 'a\\nb' }}|{{ \"tab\\there\" }}|{{ 'uni \\u00e9 \\U0001F600 \\x41' }}|{{ 'back\\\\slash' }}|{{ 'keep \\d' }}|{{ 'oct \\101' }}", {}),
    ("raise_exception", "{% if fail %}{{ raise_exception('Conversation roles must alternate') }}{% endif %}ok", {"fail": True}),
    ("undefined_attribute_of_undefined", "{{ nothing.attr }}", {}),
    ("type_error_str_plus_int", "{{ 'a' + 1 }}", {}),
    ("none_plus_string", "{{ none + 'a' }}", {}),
    ("whitespace_trim_blocks", "<ul>\n{% for x in items %}\n  <li>{{ x }}</li>\n{% endfor %}\n</ul>\n", {"items": [1, 2]}),
    ("whitespace_lstrip_blocks", "a\n    {% if true %}\n    b\n    {% endif %}\n  c {% if true %}d{% endif %}\n\t{# comment #}\n\t\t{%+ if true %}e{% endif %}\n", {}),
    ("whitespace_minus", "a   {%- if true -%}   b   {%- endif -%}   c\n{{- ' d ' -}}\n  e  {{- 'f' }}  g {#- c -#}  h", {}),
    ("whitespace_plus_end", "x{% if true +%}\ny{% endif %}\nz", {}),
    ("whitespace_comment_lines", "line1\n{# a comment #}\nline2\n  {#- indented -#}  \nline3\n", {}),
    ("raw_block", "{% raw %}{{ not evaluated }} {% if %}{% endraw %}|{%- raw -%}  spaced  {%- endraw -%}|", {}),
    ("crlf_source", "a\r\n{% if true %}\r\nb\r\n{% endif %}\r\nc\rd\r\n", {}),
    ("unicode_whitespace_lstrip", "x\n\u3000 {% if true %}y{% endif %}\n\u00a0{%- if true %}z{% endif %}", {}),
    ("nested_data_in_tags", "{{ {'a': {'b': [1, {'c': 2}]}}['a']['b'][1]['c'] }} {{ ({'x': 1}).x }} {{ [[1, 2], [3]][0][1] }}", {}),
    ("generation_prompt_variants", "{% for m in messages %}<{{ m.role }}>{{ m.content | trim }}{% if not loop.last %}\n{% endif %}{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}", {"messages": [{"role": "user", "content": " hi "}, {"role": "assistant", "content": "yo"}], "add_generation_prompt": True}),
    ("tools_none_vs_list", "{{ tools is none }} {{ tools is defined }} {% if tools %}{{ tools | length }}{% endif %}", {"tools": None}),
    ("content_list_parts", "{% for m in messages %}{% if m.content is string %}{{ m.content }}{% else %}{% for part in m.content %}{% if part.type == 'text' %}{{ part.text }}{% endif %}{% endfor %}{% endif %}{% endfor %}", {"messages": [{"role": "user", "content": [{"type": "text", "text": "part one "}, {"type": "image"}, {"type": "text", "text": "part two"}]}, {"role": "user", "content": "plain"}]}),
    ("llama3_style_header", "{{- bos_token }}\n{%- if messages[0]['role'] == 'system' %}\n    {%- set system_message = messages[0]['content']|trim %}\n    {%- set messages = messages[1:] %}\n{%- else %}\n    {%- set system_message = \"\" %}\n{%- endif %}\n{{- \"<|start_header_id|>system<|end_header_id|>\\n\\n\" }}\n{{- system_message }}\n{{- \"<|eot_id|>\" }}\n{%- for message in messages %}\n    {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' }}\n{%- endfor %}\n{%- if add_generation_prompt %}\n    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}\n{%- endif %}\n", {"bos_token": "<|begin_of_text|>", "messages": [{"role": "system", "content": " Be brief. "}, {"role": "user", "content": "Hi"}], "add_generation_prompt": True}),
    ("qwen_style_tools", "{%- if tools %}\n    {{- '<|im_start|>system\\n' }}\n    {%- if messages[0]['role'] == 'system' %}\n        {{- messages[0]['content'] }}\n    {%- else %}\n        {{- 'You are Qwen.' }}\n    {%- endif %}\n    {{- \"\\n\\n# Tools\\n\\n<tools>\" }}\n    {%- for tool in tools %}\n        {{- \"\\n\" }}\n        {{- tool | tojson }}\n    {%- endfor %}\n    {{- \"\\n</tools><|im_end|>\\n\" }}\n{%- endif %}\n{%- for message in messages %}\n    {%- if message.role == \"user\" or (message.role == \"system\" and not loop.first) %}\n        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}\n    {%- elif message.role == \"assistant\" %}\n        {{- '<|im_start|>' + message.role }}\n        {%- if message.content %}\n            {{- '\\n' + message.content }}\n        {%- endif %}\n        {%- for tool_call in message.tool_calls %}\n            {%- if tool_call.function is defined %}\n                {%- set tool_call = tool_call.function %}\n            {%- endif %}\n            {{- '\\n<tool_call>\\n{\"name\": \"' }}\n            {{- tool_call.name }}\n            {{- '\", \"arguments\": ' }}\n            {{- tool_call.arguments | tojson }}\n            {{- '}\\n</tool_call>' }}\n        {%- endfor %}\n        {{- '<|im_end|>\\n' }}\n    {%- endif %}\n{%- endfor %}\n{%- if add_generation_prompt %}\n    {{- '<|im_start|>assistant\\n' }}\n{%- endif %}\n", {"tools": [WEATHER_TOOL], "messages": [{"role": "user", "content": "Weather?"}, {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]}], "add_generation_prompt": True}),
    ("whitespace_mixed_lines", "  {{ x }}\n  {% if true %}\n  y\n  {% endif %}\n   {#- c #}\n{%- for i in [1, 2] %}  {{ i }}  {% endfor %}  \n end\n\n", {"x": "X"}),
    ("braces_in_text", "a { b } {{ '{{' }} c }} d {x} {{ '}}' }} %} #}\n{ {% if true %}{{ '{' }}{% endif %}", {}),
    ("tags_spanning_lines", "{%\n  if x\n%}\nyes{%\n  endif\n-%}\n\n after {{\n  x\n  | upper\n}}", {"x": "v"}),
    ("raw_variants", "a  {%- raw %} {{ x }} {% endraw -%}  b\n  {% raw %}\n  c\n  {% endraw %}\nd", {}),
    ("comment_trim", "x {# one #}\n{# two #}\ny\n    {#- three -#}\n    z", {}),
]
