// The Jinja interpreter behind chat templates, against jinja2 3.1.6 set up as Hugging Face
// transformers sets it up (trim_blocks, lstrip_blocks, loopcontrols, its tojson): each case's
// expected text is what jinja2 rendered for the same template and variables. Then errors
// (line and column, raise_exception's message), the folder loader and concurrent renders.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <thread>

#include "genai/chat_template.h"
#include "genai/jinja_render.h"
#include "onyx/error.h"

namespace onyx::genai {
namespace {

using OJson = nlohmann::ordered_json;

struct Case {
  const char* name;
  const char* source;
  const char* variables;  // JSON
  const char* expected;   // jinja2's output
};

const Case kCases[] = {
    {"trim_blocks", R"J({% if true %}
yes
{% endif %}
end)J", R"J({})J", R"J(yes
end)J"},
    {"lstrip_blocks", R"J(<
    {% if true %}
    x
    {% endif %}
>)J", R"J({})J", R"J(<
    x
>)J"},
    {"dash_strips", R"J(a   {%- if true -%}   b   {%- endif -%}   c)J", R"J({})J", R"J(abc)J"},
    {"dash_in_output", R"J(a  {{- 'b' -}}  c)J", R"J({})J", R"J(abc)J"},
    {"plus_keeps", R"J(a
  {%+ if true %}b{% endif %})J", R"J({})J", R"J(a
  b)J"},
    {"comment", R"J(a
  {# note #}
b {#- x -#} c)J", R"J({})J", R"J(a
bc)J"},
    {"trailing_newline_dropped", R"J(x
)J", R"J({})J", R"J(x)J"},
    {"crlf", R"J(a
{% if true %}
b
{% endif %}
)J", R"J({})J", R"J(a
b
)J"},
    {"raw", R"J({% raw %}{{ not rendered }}{% endraw %})J", R"J({})J", R"J({{ not rendered }})J"},
    {"variable_no_lstrip", R"J(a
    {{ 'x' }}
)J", R"J({})J", R"J(a
    x)J"},
    {"py_str", R"J({{ true }} {{ none }} {{ 1.0 }} {{ 1e20 }} {{ 0.1 + 0.2 }} {{ 10 / 4 }} {{ [1, 'a', none] }} {{ {'k': [true]} }} {{ (1,) }})J", R"J({})J", R"J(True None 1.0 1e+20 0.30000000000000004 2.5 [1, 'a', None] {'k': [True]} (1,))J"},
    {"repr_quotes", R"J({{ ["it's", 'say "hi"', 'tab\t', 'é'] }})J", R"J({})J", R"J(["it's", 'say "hi"', 'tab\t', 'é'])J"},
    {"json_vars", R"J({{ d }}|{{ d.a }}|{{ d['m'].k }})J", R"J({"d": {"z": 1, "a": [1, 2.5, "x", null, true], "m": {"k": "v"}}})J", R"J({'z': 1, 'a': [1, 2.5, 'x', None, True], 'm': {'k': 'v'}}|[1, 2.5, 'x', None, True]|v)J"},
    {"string_escapes", R"J({{ 'a\nb\u00e9\x41\\' }})J", R"J({})J", R"J(a
béA\)J"},
    {"adjacent_strings", R"J({{ 'a' 'b' "c" }})J", R"J({})J", R"J(abc)J"},
    {"arith", R"J({{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7.5 // 2 }} {{ 2 ** 10 }} {{ 'ab' * 2 }} {{ [1] + [2] }} {{ 1 + true }})J", R"J({})J", R"J(3 -4 2 3.0 1024 abab [1, 2] 2)J"},
    {"concat", R"J({{ 1 ~ 'a' ~ none ~ undefined_name }})J", R"J({})J", R"J(1aNone)J"},
    {"compare", R"J({{ 1 < 2 < 3 }} {{ 1 < 3 < 2 }} {{ 'b' > 'a' }} {{ 1 == 1.0 }} {{ [1, 2] == [1, 2] }} {{ 'x' in 'xyz' }} {{ 2 not in [1] }} {{ 'k' in {'k': 1} }})J", R"J({})J", R"J(True False True True True True True True)J"},
    {"logic", R"J({{ none or 'dflt' }} {{ 0 and 1 }} {{ not 0 }} {{ not 1 == 2 }} {{ 'yes' if 0 else 'no' }}[{{ 'x' if false }}])J", R"J({})J", R"J(dflt 0 True True no[])J"},
    {"precedence", R"J({{ -3|abs }} {{ 1 + 2 * 3 }} {{ 'a' ~ 2 * 3 }} {{ not x is defined }})J", R"J({})J", R"J(3 7 a6 True)J"},
    {"subscripts", R"J({{ m[1:] | map(attribute='role') | list }} {{ m[-1].content }} {{ 'hello'[::-1] }} {{ 'héllo'[1:3] }} {{ [1,2,3][::2] }})J", R"J({"m": [{"role": "system", "content": "S"}, {"role": "user", "content": "u1"}, {"role": "assistant", "content": "a1"}, {"role": "user", "content": "u2"}]})J", R"J(['user', 'assistant', 'user'] u2 olleh él [1, 3])J"},
    {"truthiness", R"J({% for v in [0, 1, '', 'a', [], [0], {}, none, 0.0] %}{{ 'T' if v else 'F' }}{% endfor %})J", R"J({})J", R"J(FTFTFTFFF)J"},
    {"loop_vars", R"J({% for x in ['a','b','c'] %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.previtem }}{{ loop.nextitem }}{{ loop.cycle('o', 'e') }};{% endfor %})J", R"J({})J", R"J(103TrueFalse3bo;212FalseFalse3ace;321FalseTrue3bo;)J"},
    {"loop_filter", R"J({% for m in messages if m.role != 'system' %}{{ loop.index }}/{{ loop.length }}:{{ m.content }} {% endfor %})J", R"J({"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "u1"}, {"role": "assistant", "content": "a1"}, {"role": "user", "content": "u2"}]})J", R"J(1/3:u1 2/3:a1 3/3:u2 )J"},
    {"loop_else", R"J({% for x in [] %}x{% else %}empty{% endfor %})J", R"J({})J", R"J(empty)J"},
    {"loop_items", R"J({% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{% for k in d %}{{ k }}{% endfor %})J", R"J({"d": {"z": 1, "a": [1, 2.5, "x", null, true], "m": {"k": "v"}}})J", R"J(z=1;a=[1, 2.5, 'x', None, True];m={'k': 'v'};zam)J"},
    {"loop_unpack", R"J({% for a, (b, c) in [(1, (2, 3)), (4, (5, 6))] %}{{ a + b + c }} {% endfor %})J", R"J({})J", R"J(6 15 )J"},
    {"break_continue", R"J({% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i == 5 %}{% break %}{% endif %}{{ i }}{% endfor %})J", R"J({})J", R"J(0134)J"},
    {"loop_scope", R"J({% set x = 'outer' %}{% for i in [1, 2] %}{{ x }}{% set x = i %}{{ x }} {% endfor %}{{ x }})J", R"J({})J", R"J(outer1 outer2 outer)J"},
    {"namespace", R"J({% set ns = namespace(n=0, last=none) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}{% set ns.last = m.role %}{% endfor %}{{ ns.n }} {{ ns.last }})J", R"J({"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "u1"}, {"role": "assistant", "content": "a1"}, {"role": "user", "content": "u2"}]})J", R"J(4 user)J"},
    {"if_no_scope", R"J({% if true %}{% set y = 5 %}{% endif %}{{ y }})J", R"J({})J", R"J(5)J"},
    {"set_block", R"J({% set s %}  a{{ 1 }}  {% endset %}[{{ s }}]{% set t | trim | upper %}  b  {% endset %}[{{ t }}])J", R"J({})J", R"J([  a1  ][B])J"},
    {"set_tuple", R"J({% set a, b = 1, 2 %}{{ a }}{{ b }})J", R"J({})J", R"J(12)J"},
    {"with", R"J({% with a = 1, b = 2 %}{{ a + b }}{% endwith %}[{{ a }}])J", R"J({})J", R"J(3[])J"},
    {"filter_block", R"J({% filter upper %}abc{{ 'd' }}{% endfilter %})J", R"J({})J", R"J(ABCD)J"},
    {"macro", R"J({% macro m(a, b='B') %}<{{ a }}{{ b }}>{% endmacro %}{{ m(1) }}{{ m(1, 2) }}{{ m(b=3, a=4) }}[{{ m() }}])J", R"J({})J", R"J(<1B><12><43>[<B>])J"},
    {"macro_varargs", R"J({% macro m(a) %}{{ a }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, 3, k='v') }})J", R"J({})J", R"J(1(2, 3){'k': 'v'})J"},
    {"macro_late_binding", R"J({% macro m() %}{{ x }}{% endmacro %}{% set x = 1 %}{{ m() }}{% set x = 2 %}{{ m() }})J", R"J({})J", R"J(12)J"},
    {"macro_default_uses_param", R"J({% macro m(a, b=a * 2) %}{{ b }}{% endmacro %}{{ m(3) }})J", R"J({})J", R"J(6)J"},
    {"call_block", R"J({% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}{% call wrap('b') %}bold{% endcall %}{% macro each(xs) %}{% for x in xs %}{{ caller(x) }}{% endfor %}{% endmacro %}{% call(x) each([1, 2]) %}[{{ x }}]{% endcall %})J", R"J({})J", R"J(<b>bold</b>[1][2])J"},
    {"macro_recursive", R"J({% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * fact(n - 1)|int }}{% endif %}{% endmacro %}{{ fact(5) }})J", R"J({})J", R"J(120)J"},
    {"filters_text", R"J({{ '  a b  '|trim }}|{{ 'xxaxx'|trim('x') }}|{{ 'abc'|upper }}|{{ 'ABC'|lower }}|{{ 'hello wORLD'|title }}|{{ 'hELLO'|capitalize }}|{{ 'a-b'|replace('-', '+') }}|{{ 'aaa'|replace('a', 'b', 2) }}|{{ 'ab'|center(6) }}|{{ 'one two  three'|wordcount }})J", R"J({})J", R"J(a b|a|ABC|abc|Hello World|Hello|a+b|bba|  ab  |3)J"},
    {"filters_seq", R"J({{ [3, 1, 2]|sort }} {{ [3, 1, 2]|sort(reverse=true) }} {{ ['b', 'A', 'a']|unique|list }} {{ [1, 2, 3]|sum }} {{ ['a', 'B']|max }} {{ [4, 2]|min }} {{ [1, 2]|first }} {{ [1, 2]|last }} {{ 'abc'|list }} {{ [1, 2]|reverse|list }} {{ [1, 2, 3, 4, 5]|batch(2)|list }})J", R"J({})J", R"J([1, 2, 3] [3, 2, 1] ['b', 'A'] 6 B 2 1 2 ['a', 'b', 'c'] [2, 1] [[1, 2], [3, 4], [5]])J"},
    {"filters_len", R"J({{ messages|length }} {{ 'héllo'|length }} {{ {'a': 1}|count }} {{ undefined_name|length }})J", R"J({"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "u1"}, {"role": "assistant", "content": "a1"}, {"role": "user", "content": "u2"}]})J", R"J(4 5 1 0)J"},
    {"filters_join", R"J({{ [1, 'a', none]|join(', ') }} {{ messages|join('|', attribute='role') }})J", R"J({"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "u1"}, {"role": "assistant", "content": "a1"}, {"role": "user", "content": "u2"}]})J", R"J(1, a, None system|user|assistant|user)J"},
    {"filters_select", R"J({{ messages|selectattr('role', 'equalto', 'user')|map(attribute='content')|list }} {{ messages|rejectattr('role', 'in', ['user', 'system'])|list|length }} {{ [0, 1, 2, 3]|select('odd')|list }} {{ [0, 1, '']|reject|list }} {{ messages|map(attribute='missing', default='-')|join }})J", R"J({"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "u1"}, {"role": "assistant", "content": "a1"}, {"role": "user", "content": "u2"}]})J", R"J(['u1', 'u2'] 1 [1, 3] [0, ''] ----)J"},
    {"filters_dict", R"J({{ d|dictsort }} {{ d|dictsort(by='value', reverse=true) }} {{ d|items|list }})J", R"J({"d": {"b": 2, "a": 3, "c": 1}})J", R"J([('a', 3), ('b', 2), ('c', 1)] [('a', 3), ('b', 2), ('c', 1)] [('b', 2), ('a', 3), ('c', 1)])J"},
    {"filters_default", R"J({{ x|default('dflt') }} {{ none|default('dflt') }} {{ ''|default('dflt', true) }} {{ x|d('d') }})J", R"J({})J", R"J(dflt None dflt d)J"},
    {"filters_numbers", R"J({{ '42'|int }} {{ '4.7'|int }} {{ 'x'|int }} {{ 'x'|int(7) }} {{ 3.9|int }} {{ '2.5'|float }} {{ 'x'|float }} {{ 2.5|round }} {{ 3.5|round }} {{ 2.675|round(2) }} {{ 2.1|round(method='ceil') }} {{ -4|abs }})J", R"J({})J", R"J(42 4 0 7 3 2.5 0.0 2.0 4.0 2.67 3.0 4)J"},
    {"filters_string", R"J({{ 5|string }} {{ [1]|string }} {{ true|string }} {{ '%s=%d'|format('a', 3) }} {{ '<a&b>'|e }} {{ 'x\ny'|indent(2, first=true) }})J", R"J({})J", R"J(5 [1] True a=3 &lt;a&amp;b&gt;   x
  y)J"},
    {"tojson", R"J({{ d|tojson }}
{{ d|tojson(indent=2) }}
{{ 'é'|tojson }} {{ 'é'|tojson(ensure_ascii=true) }} {{ d.m|tojson(separators=(',', ':')) }} {{ {'b': 1, 'a': 2}|tojson(sort_keys=true) }} {{ [1.5, none, 'q"\n']|tojson }})J", R"J({"d": {"z": 1, "a": [1, 2.5, "x", null, true], "m": {"k": "v"}}})J", R"J({"z": 1, "a": [1, 2.5, "x", null, true], "m": {"k": "v"}}
{
  "z": 1,
  "a": [
    1,
    2.5,
    "x",
    null,
    true
  ],
  "m": {
    "k": "v"
  }
}
"é" "\u00e9" {"k":"v"} {"a": 2, "b": 1} [1.5, null, "q\"\n"])J"},
    {"markup", R"J({{ ('<b>'|safe) + '<i>' }} {{ '<i>' + ('<b>'|safe) }} {{ ('<b>'|safe) ~ '<i>' }} {{ ('x'|safe).replace('x', '&') }})J", R"J({})J", R"J(<b>&lt;i&gt; &lt;i&gt;<b> <b><i> &amp;)J"},
    {"tests", R"J({{ x is defined }}{{ x is undefined }}{{ none is none }}{{ 'a' is string }}{{ 1 is number }}{{ true is number }}{{ 1 is integer }}{{ 1.0 is float }}{{ {} is mapping }}{{ [] is iterable }}{{ 'a' is sequence }}{{ x is iterable }}{{ true is boolean }}{{ 3 is odd }}{{ 4 is even }}{{ 9 is divisibleby 3 }}{{ 1 is eq 1 }}{{ 'a' is in 'abc' }}{{ x is not defined }}{{ range is callable }})J", R"J({})J", R"J(FalseTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrue)J"},
    {"str_methods", R"J({{ ' a '.strip() }}|{{ 'xax'.lstrip('x') }}|{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}|{{ 'a b c'.split(' ', 1) }}|{{ 'a b c'.rsplit(' ', 1) }}|{{ 'abc'.startswith('ab') }}|{{ 'abc'.endswith(('x', 'c')) }}|{{ 'hello world'.title() }}|{{ 'x'.upper() }}|{{ 'abcb'.find('b') }}|{{ 'abcb'.rfind('b') }}|{{ 'abcb'.count('b') }}|{{ '-'.join(['a', 'b']) }}|{{ '{} and {name}'.format(1, name='n') }}|{{ 'a\nb'.splitlines() }}|{{ 'ab'.replace('', '.') }})J", R"J({})J", R"J(a|ax|['a', 'b', '', 'c']|['a', 'b']|['a', 'b c']|['a b', 'c']|True|True|Hello World|X|1|3|2|a-b|1 and n|['a', 'b']|.a.b.)J"},
    {"dict_methods", R"J({{ d.get('z') }} {{ d.get('nope') }} {{ d.get('nope', 'dflt') }} {{ d.keys()|list }} {{ d.m.values()|list }} {{ d.m.items()|list }})J", R"J({"d": {"z": 1, "a": [1, 2.5, "x", null, true], "m": {"k": "v"}}})J", R"J(1 None dflt ['z', 'a', 'm'] ['v'] [('k', 'v')])J"},
    {"list_methods", R"J({{ [1, 2, 1].count(1) }} {{ ['a', 'b'].index('b') }})J", R"J({})J", R"J(2 1)J"},
    {"globals", R"J({{ range(3)|list }} {{ range(1, 7, 2)|list }} {{ dict(a=1) }} {{ namespace(a=1).a }})J", R"J({})J", R"J([0, 1, 2] [1, 3, 5] {'a': 1} 1)J"},
    {"undefined_prints_empty", R"J([{{ nothing }}][{{ d.nope }}][{{ d['nope'] }}][{{ none.attr }}])J", R"J({"d": {"z": 1, "a": [1, 2.5, "x", null, true], "m": {"k": "v"}}})J", R"J([][][][])J"},
    {"unknown_filter_in_if", R"J({% if false %}{{ x|no_such_filter }}{% endif %}ok)J", R"J({})J", R"J(ok)J"},
};

TEST(ChatTemplate, RendersAsJinja2Does) {
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name);
    try {
      ChatTemplate t(c.source);
      EXPECT_EQ(t.render(OJson::parse(c.variables)), c.expected);
    } catch (const Error& e) {
      ADD_FAILURE() << e.what();
    }
  }
}

// The message of the error that rendering (or parsing) `source` raises.
std::string error_of(const std::string& source, const OJson& variables = OJson::object()) {
  try {
    ChatTemplate(source).render(variables);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(ChatTemplate, SyntaxErrorsNameLineAndColumn) {
  EXPECT_EQ(error_of("a\n{% frobnicate %}"), "parsing the chat template: line 2, column 4: unknown tag 'frobnicate'");
  EXPECT_EQ(error_of("{% for x in y %}\n{{ x }}"),
            "parsing the chat template: line 2, column 8: unexpected end of template: the 'for' tag at line 1, "
            "column 4 is not closed (expected 'else' or 'endfor')");
  EXPECT_EQ(error_of("{% for x in y %}{% endif %}"),
            "parsing the chat template: line 1, column 20: unexpected tag 'endif'; the innermost open block is "
            "'for' at line 1, column 4");
  EXPECT_EQ(error_of("{{ 1 + }}"),
            "parsing the chat template: line 1, column 8: expected an expression, got the end of the {{ }} expression");
  EXPECT_EQ(error_of("x\n  {{ 'abc }}"), "parsing the chat template: line 2, column 6: the string is not closed");
  EXPECT_EQ(error_of("{{ x|no_such_filter }}"), "parsing the chat template: line 1, column 6: no filter named 'no_such_filter'");
  EXPECT_EQ(error_of("{% break %}"), "parsing the chat template: line 1, column 4: 'break' outside of a loop");
  EXPECT_EQ(error_of("{{ (1, 2]) }}"), "parsing the chat template: line 1, column 9: unexpected ']', expected ')'");
  EXPECT_EQ(error_of("{# open comment"), "parsing the chat template: line 1, column 1: the comment {# is not closed by #}");
}

TEST(ChatTemplate, RenderErrorsNameWhereTheyHappened) {
  EXPECT_EQ(error_of("line1\n  {{ nothing.attr }}"), "rendering the chat template: line 2, column 13: 'nothing' is undefined");
  EXPECT_EQ(error_of("{{ nothing + 1 }}"), "rendering the chat template: line 1, column 12: 'nothing' is undefined");
  EXPECT_EQ(error_of("{{ 'a' + 1 }}"),
            "rendering the chat template: line 1, column 8: can only concatenate str (not \"int\") to str");
  EXPECT_EQ(error_of("{% for x in 5 %}{% endfor %}"),
            "rendering the chat template: line 1, column 13: 'int' object is not iterable");
  EXPECT_EQ(error_of("{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}"),
            "rendering the chat template: line 1, column 34: macro 'm' takes not more than 1 argument(s)");
  EXPECT_EQ(error_of("{{ messages.append(1) }}", OJson{{"messages", OJson::array()}}),
            "rendering the chat template: line 1, column 12: access to attribute 'append' of 'list' object is unsafe.");
  // jinja2 lets an unknown filter stand in an `if` and fails only when it runs.
  EXPECT_EQ(error_of("{% if true %}{{ x|no_such_filter }}{% endif %}"),
            "rendering the chat template: line 1, column 19: no filter named 'no_such_filter'");
}

// Integer arithmetic past 64 bits is an error, never a wrapped value (jinja2 has Python's
// unbounded integers); ** takes as many steps as its exponent has bits. The first three are the
// fuzz target's findings (tests/fixtures/fuzz), replayed here.
TEST(ChatTemplate, IntegerArithmeticPast64BitsIsAnError) {
  auto file = [](const char* name) {
    std::ifstream in(std::string(ONYX_SOURCE_DIR) + "/tests/fixtures/fuzz/" + name, std::ios::binary);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    return text.substr(0, text.find('\0'));  // the template; messages (if any) follow a NUL
  };
  for (const char* name : {"chat_template_int_pow_overflow.crash", "chat_template_int_add_overflow.crash"}) {
    SCOPED_TRACE(name);
    const std::string source = file(name);
    ASSERT_FALSE(source.empty());
    EXPECT_NE(error_of(source).find("integer overflow"), std::string::npos) << error_of(source);
  }
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(ChatTemplate(file("chat_template_int_pow_linear_loop.timeout")).render(OJson::object()), "1");
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 1.0);
  EXPECT_EQ(ChatTemplate("{{ 2 ** 62 }} {{ (-2) ** 63 }} {{ 3 ** 0 }} {{ 0 ** 5 }}").render(OJson::object()),
            "4611686018427387904 -9223372036854775808 1 0");
  EXPECT_NE(error_of("{{ -9223372036854775807 - 2 }}").find("integer overflow"), std::string::npos);
  EXPECT_NE(error_of("{{ 4294967296 * 4294967296 }}").find("integer overflow"), std::string::npos);
  EXPECT_NE(error_of("{{ (-9223372036854775807 - 1) // -1 }}").find("integer overflow"), std::string::npos);
  EXPECT_NE(error_of("{{ 'ab' * 9000000000000 }}").find("more than"), std::string::npos);
  EXPECT_EQ(ChatTemplate("{{ 'ab' * 3 }}{{ [1] * 2 }}").render(OJson::object()), "ababab[1, 1]");
}

// tests/fixtures/fuzz/chat_template_format_width_overflow.crash (the fuzz target's finding, UBSan):
// a %-format's width of 14 digits overflowed the int it was read into. Widths and precisions past
// 2^20 are an error naming them; those below are honored whole, where a number's field used to be
// cut at 511 characters.
TEST(ChatTemplate, FormatWidthsPastTheLimitAreAnErrorAndWideFieldsAreWhole) {
  std::ifstream in(std::string(ONYX_SOURCE_DIR) + "/tests/fixtures/fuzz/chat_template_format_width_overflow.crash",
                   std::ios::binary);
  const std::string source((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_FALSE(source.empty());
  EXPECT_NE(error_of(source).find("format width past"), std::string::npos) << error_of(source);
  EXPECT_NE(error_of("{{ '%.99999999999f' % 1.5 }}").find("format precision past"), std::string::npos);
  EXPECT_NE(error_of("{{ '{:99999999999d}'.format(7) }}").find("format width past"), std::string::npos);
  EXPECT_EQ(ChatTemplate("{{ '%600d' % 7 }}").render(OJson::object()), std::string(599, ' ') + "7");
  EXPECT_EQ(ChatTemplate("{{ '%-5d|%.3f|%05.1f' % (42, 2.5, 3.14159) }}").render(OJson::object()),
            "42   |2.500|003.1");
  EXPECT_EQ(ChatTemplate("{{ '{:>8.2f}|{:<4d}|'.format(3.14159, 7) }}").render(OJson::object()), "    3.14|7   |");
}

// A namespace is the one value that changes after it is built, so the only way to a cycle of
// shared values ({% set ns.me = ns %}, two namespaces holding each other, a list holding the
// namespace that holds it). The render breaks them when it ends: the namespaces are freed.
// tests/fixtures/fuzz/chat_template_namespace_self_reference.leak is the fuzz target's finding
// (LeakSanitizer); the fuzz build replays it, this checks the namespaces go without a sanitizer.
TEST(ChatTemplate, NamespacesInReferenceCyclesAreFreedWhenTheRenderEnds) {
  std::weak_ptr<jinja::Object> self, a, b, in_list;
  {
    jinja::Dict no_variables;
    jinja::Renderer r(no_variables);
    jinja::Value ns = r.new_namespace({});
    static_cast<jinja::Namespace&>(ns.object()).attrs.set(jinja::Value("me"), ns);
    self = ns.object_ptr();
    jinja::Value x = r.new_namespace({}), y = r.new_namespace({});
    static_cast<jinja::Namespace&>(x.object()).attrs.set(jinja::Value("other"), y);
    static_cast<jinja::Namespace&>(y.object()).attrs.set(jinja::Value("other"), x);
    a = x.object_ptr();
    b = y.object_ptr();
    jinja::Value z = r.new_namespace({});
    static_cast<jinja::Namespace&>(z.object()).attrs.set(jinja::Value("items"), jinja::Value::list({jinja::Value(1), z}));
    in_list = z.object_ptr();
  }
  EXPECT_TRUE(self.expired());
  EXPECT_TRUE(a.expired());
  EXPECT_TRUE(b.expired());
  EXPECT_TRUE(in_list.expired());
  // Through templates: the cycles render as jinja2 renders them, and the render ends.
  EXPECT_EQ(ChatTemplate("{% set ns = namespace(n=0) %}{% set ns.n = ns %}{{ ns.n.n.n is defined }}").render(OJson::object()),
            "True");
  EXPECT_EQ(ChatTemplate("{% for i in range(100) %}{% set a = namespace() %}{% set b = namespace(a=a) %}"
                         "{% set a.b = b %}{% endfor %}{{ 'done' }}")
                .render(OJson::object()),
            "done");
  std::ifstream in(std::string(ONYX_SOURCE_DIR) + "/tests/fixtures/fuzz/chat_template_namespace_self_reference.leak",
                   std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_FALSE(text.empty());
  EXPECT_NO_THROW(ChatTemplate(text.substr(0, text.find('\0'))).render(OJson::object()));
}

TEST(ChatTemplate, RaiseExceptionCarriesTheTemplatesMessage) {
  const char* source =
      "{% for m in messages %}\n"
      "  {% if (m.role == 'user') != (loop.index0 % 2 == 0) %}\n"
      "    {{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}\n"
      "  {% endif %}\n"
      "{% endfor %}";
  OJson vars = {{"messages", OJson::array({{{"role", "user"}}, {{"role", "user"}}})}};
  try {
    ChatTemplate(source).render(vars);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.message(), "Conversation roles must alternate user/assistant/user/assistant/...");
    EXPECT_EQ(std::string(e.what()),
              "rendering the chat template: line 3, column 8: the template raised an error: "
              "Conversation roles must alternate user/assistant/user/assistant/...");
  }
  OJson ok = {{"messages", OJson::array({{{"role", "user"}}, {{"role", "assistant"}}})}};
  EXPECT_EQ(ChatTemplate(source).render(ok), "");
}

TEST(ChatTemplate, KeepsTheKeyOrderOfOrderedJson) {
  ChatTemplate t("{{ tool|tojson }} {% for k, v in tool.items() %}{{ k }}{% endfor %}");
  OJson tool = OJson::parse(R"({"name": "f", "description": "d", "a": 1})");
  EXPECT_EQ(t.render({{"tool", tool}}), R"({"name": "f", "description": "d", "a": 1} namedescriptiona)");
  // A nlohmann::json converts too; its keys come sorted.
  nlohmann::json sorted = nlohmann::json::parse(R"({"name": "f", "a": 1})");
  EXPECT_EQ(t.render({{"tool", sorted}}), R"({"a": 1, "name": "f"} aname)");
}

TEST(ChatTemplate, VariablesMustBeAnObject) {
  ChatTemplate t("x");
  EXPECT_THROW(t.render(OJson::array()), Error);
  EXPECT_THROW(ChatTemplate("\xff{{ x }}"), Error);
}

class ChatTemplateFolder : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("onyx_chat_template_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  void write(const std::string& name, const std::string& text) {
    std::filesystem::create_directories((dir_ / name).parent_path());
    std::ofstream(dir_ / name, std::ios::binary) << text;
  }
  std::string dir() const { return dir_.string(); }
  std::filesystem::path dir_;
};

TEST_F(ChatTemplateFolder, ReadsTheTemplateAndTokensOfTokenizerConfig) {
  write("tokenizer_config.json", R"({
    "bos_token": {"content": "<s>", "lstrip": false, "__type": "AddedToken"},
    "eos_token": "</s>",
    "pad_token": null,
    "chat_template": "{{ bos_token }}{% for m in messages %}[{{ m.role }}:{{ m.content }}]{% endfor %}{% if add_generation_prompt %}>{% endif %}{{ eos_token }}{{ tools is none }}"
  })");
  OJson tokens = read_special_tokens(dir());
  EXPECT_EQ(tokens, OJson::parse(R"({"bos_token": "<s>", "eos_token": "</s>"})"));
  ChatTemplate t = ChatTemplate::from_folder(dir());
  OJson messages = OJson::parse(R"([{"role": "user", "content": "hi"}])");
  EXPECT_EQ(apply_chat_template(t, messages, true), "<s>[user:hi]></s>True");
  EXPECT_EQ(apply_chat_template(t, messages, false, {{"tools", OJson::array()}}), "<s>[user:hi]</s>False");
}

TEST_F(ChatTemplateFolder, PicksANamedTemplateFromAList) {
  write("tokenizer_config.json", R"({"chat_template": [{"name": "default", "template": "D"},
                                                        {"name": "tool_use", "template": "T"}]})");
  EXPECT_EQ(find_chat_template(dir()), "D");
  EXPECT_EQ(find_chat_template(dir(), "tool_use"), "T");
  try {
    find_chat_template(dir(), "rag");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("has no chat template named 'rag' (it has: default, tool_use)"), std::string::npos)
        << e.what();
  }
}

TEST_F(ChatTemplateFolder, PrefersChatTemplateJinja) {
  write("tokenizer_config.json", R"({"chat_template": "from config"})");
  write("chat_template.jinja", "from file");
  write("additional_chat_templates/extra.jinja", "extra");
  EXPECT_EQ(find_chat_template(dir()), "from file");
  EXPECT_EQ(find_chat_template(dir(), "extra"), "extra");
}

TEST_F(ChatTemplateFolder, SaysWhereItLookedWhenThereIsNone) {
  write("tokenizer_config.json", R"({"eos_token": "</s>"})");
  try {
    find_chat_template(dir());
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "'" + dir() + "' has no chat template (looked for chat_template.jinja, " +
                                         "\"chat_template\" in tokenizer_config.json, chat_template.json)");
  }
}

TEST(ChatTemplate, RendersOnManyThreadsAtOnce) {
  ChatTemplate t(
      "{% set ns = namespace(n=0) %}{% macro turn(m) %}<{{ m.role }}>{{ m.content|trim }}{% endmacro %}"
      "{% for m in messages %}{% set ns.n = ns.n + 1 %}{{ turn(m) }}{% endfor %}#{{ ns.n }}");
  std::vector<std::string> results(8);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < results.size(); ++i)
    threads.emplace_back([&, i] {
      OJson messages = OJson::array();
      for (size_t k = 0; k <= i; ++k) messages.push_back({{"role", "user"}, {"content", " m" + std::to_string(k) + " "}});
      for (int rep = 0; rep < 200; ++rep) results[i] = t.render({{"messages", messages}});
    });
  for (auto& th : threads) th.join();
  for (size_t i = 0; i < results.size(); ++i) {
    std::string want;
    for (size_t k = 0; k <= i; ++k) want += "<user>m" + std::to_string(k);
    EXPECT_EQ(results[i], want + "#" + std::to_string(i + 1));
  }
}

}  // namespace
}  // namespace onyx::genai
