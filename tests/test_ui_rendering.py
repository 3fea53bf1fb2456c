"""Renderers of step content (studio/rendering), on hand-written and real recorded content."""

from __future__ import annotations

import json

import pytest
from django.utils.safestring import SafeString

from studio.rendering import detect_kind, render_action, render_observation, render_preview
from studio.rendering.ansi import ansi_to_html
from studio.rendering.json_view import render_json_value
from studio.rendering.safe import join
from tests.support.ui import audit_markup


def text_of(html: str) -> str:
    return "".join(audit_markup(html).text)


# ---------------------------------------------------------------- terminal / ANSI


def test_ansi_colours_become_classed_spans_and_reset():
    html = ansi_to_html("\x1b[1;31mFAIL\x1b[0m ok \x1b[32mPASS\x1b[39m plain")
    assert '<span class="ansi-bold ansi-fg-1">FAIL</span>' in html
    assert '<span class="ansi-fg-2">PASS</span>' in html
    assert html.endswith(" plain")
    assert "\x1b" not in html


def test_ansi_bright_256_and_background_colours():
    html = ansi_to_html("\x1b[93ma\x1b[0m\x1b[38;5;4mb\x1b[0m\x1b[44mc\x1b[0m\x1b[38;2;1;2;3md")
    assert '<span class="ansi-fg-11">a</span>' in html
    assert '<span class="ansi-fg-4">b</span>' in html
    assert '<span class="ansi-bg-4">c</span>' in html
    # true colour is dropped, text kept
    assert html.endswith("d") and "38;2" not in html


def test_other_escape_sequences_and_controls_are_stripped():
    raw = "\x1b]0;window title\x07\x1b[2J\x1b[?25lready\x1b[K\x07\x08 done"
    assert ansi_to_html(raw) == "ready done"


def test_carriage_return_keeps_what_the_terminal_shows():
    assert ansi_to_html("progress 10%\rprogress 99%\r\ndone") == "progress 99%\ndone"


def test_terminal_text_is_escaped():
    html = render_observation("terminal", "$ cat x.html\n<b>bold</b> & \x1b[31m<i>\x1b[0m", {})
    assert "&lt;b&gt;bold&lt;/b&gt; &amp; " in html
    assert '<span class="ansi-fg-1">&lt;i&gt;</span>' in html
    assert 'class="term"' in html


def test_join_refuses_unescaped_text():
    with pytest.raises(TypeError):
        join([SafeString("<b>ok</b>"), "<script>"])


# ---------------------------------------------------------------- JSON


def test_json_tool_result_is_a_foldable_tree():
    value = {"user": {"name": "Ada", "age": 36, "admin": False}, "ids": list(range(30))}
    html = render_observation("mcp", json.dumps(value), {})
    assert detect_kind("mcp", json.dumps(value))[0] == "json"
    assert html.count("<details") == 3
    assert '<span class="j-key">"name"</span>: <span class="j-str">"Ada"</span>' in html
    assert '<span class="j-num">36</span>' in html and '<span class="j-bool">false</span>' in html
    # the 30-item array starts folded, the small object open
    ids_node = html[html.index('"ids"') :]
    assert ids_node.index("<details") < ids_node.index("30 items")
    assert '<details class="j-node"><summary><span class="j-punct">[</span>' in ids_node


def test_json_inside_a_string_is_expanded(shared_data):
    # ToolBench wraps API responses as a JSON string inside {"error", "response"}.
    value = {"error": "", "response": json.dumps([{"id": "A1", "phone": "+687"}])}
    html = render_observation("mcp", json.dumps(value), {})
    assert 'class="j-embedded"' in html
    assert '<span class="j-key">"phone"</span>' in html


def test_huge_json_falls_back_to_raw_text_past_the_node_budget():
    value = [{"k": i} for i in range(5000)]
    html = render_json_value(value)
    assert 'class="j-raw"' in html
    assert '"k": 4999' in text_of(html)


def test_multiline_strings_stay_readable():
    html = render_json_value({"stdout": "line 1\nline 2"})
    assert '<pre class="j-str j-multiline">line 1\nline 2</pre>' in html


# ---------------------------------------------------------------- search


def test_search_results_json_become_cards_and_only_http_links():
    results = {
        "organic_results": [
            {"title": "Python", "link": "https://www.python.org/", "snippet": "The language."},
            {"title": "Trap", "link": "javascript:alert(1)", "snippet": "no link"},
        ]
    }
    text = json.dumps(results)
    assert detect_kind("search", text)[0] == "search"
    html = render_observation("search", text, {})
    assert html.count('class="search-card"') == 2
    assert 'href="https://www.python.org/"' in html
    assert 'rel="noopener noreferrer nofollow"' in html
    assert '<div class="sc-title">Trap</div>' in html  # shown, not linked
    assert 'href="javascript' not in html
    assert "The language." in html


def test_search_results_text_listing_become_cards():
    text = (
        "Title: Gadwall - Wikipedia\nURL: https://en.wikipedia.org/wiki/Gadwall\n"
        "Snippet: The gadwall is a common dabbling duck.\n\n"
        "Title: Gadwall | Audubon\nURL: https://www.audubon.org/gadwall\nSnippet: Field guide."
    )
    kind, results = detect_kind("search", text)
    assert kind == "search" and [r["title"] for r in results] == [
        "Gadwall - Wikipedia",
        "Gadwall | Audubon",
    ]
    html = render_observation("search", text, {})
    assert 'href="https://www.audubon.org/gadwall"' in html


def test_fireact_observation_is_a_snippet_card(shared_data):
    data = json.loads(
        (shared_data / "search/fireact/hotpotqa_dev_ft-gpt-3.5-turbo-0613_serpapi.json").read_text()
    )
    observations = [
        m["content"].removeprefix("Observation: ")
        for rec in data.values()
        for m in rec["traj"]
        if m["role"] == "user"
        and m["content"].startswith("Observation: ")
        and "reward" not in m["content"]
    ]
    assert observations
    html = render_observation("search", observations[0], {})
    assert 'class="search-card single"' in html
    assert text_of(html).strip().endswith(observations[0].strip()[-20:])


# ---------------------------------------------------------------- diffs


def test_swe_agent_submission_patch_is_highlighted(shared_data):
    traj = json.loads(
        (
            shared_data / "swe/swe-agent/replay_default__marshmallow-code__marshmallow-1867.traj"
        ).read_text()
    )
    patch = traj["info"]["submission"]
    assert detect_kind("swe", patch)[0] == "diff"
    html = render_observation("swe", patch, {})
    assert '<span class="d-file">--- a/src/marshmallow/fields.py</span>' in html
    assert '<span class="d-hunk">@@ -1472,7 +1472,7 @@ class TimeDelta(Field):</span>' in html
    assert html.count('class="d-add"') == 1 and html.count('class="d-del"') == 1


# ---------------------------------------------------------------- Android / web trees


def test_androidworld_ui_elements_render_as_a_screen(shared_data):
    episode = json.loads(
        (
            shared_data
            / "android/android-world-agents/results_seeact__ContactsAddContact_base_gpt-4o-mini_48e64bf7.json"
        ).read_text()
    )
    elements = episode["step_records"][1]["state"]["ui_elements"]
    html = render_observation("android", json.dumps(elements), {})
    assert detect_kind("android", json.dumps(elements))[0] == "android"
    assert html.count('class="ui-el"') == len(elements)
    assert f"{len(elements)} UI elements" in html
    assert '<span class="ui-text">"Create new contact"</span>' in html
    assert '<span class="chip">clickable</span>' in html
    assert "(328,1432)–(752,1548)" in html


def test_android_text_form_is_parsed():
    text = (
        "UI element 0: UIElement(text='Settings', content_description=None, "
        "class_name='android.widget.TextView', bbox_pixels=BoundingBox(x_min=1, x_max=9, "
        "y_min=2, y_max=8), is_clickable=True, is_editable=False)\n"
        "UI element 1: UIElement(text=None, content_description='Back', "
        "class_name='android.widget.ImageButton', is_clickable=True)"
    )
    kind, elements = detect_kind("android", text)
    assert kind == "android" and len(elements) == 2
    html = render_observation("android", text, {})
    assert '<span class="ui-class">TextView</span> <span class="ui-text">"Settings"</span>' in html
    assert "desc: Back" in html and "(1,2)–(9,8)" in html


def test_webvoyager_element_list_renders_each_element(shared_data):
    messages = json.loads(
        (shared_data / "web/webvoyager/taskGitHub--0__interact_messages.json").read_text()
    )
    text = next(
        part["text"]
        for m in messages
        if isinstance(m["content"], list)
        for part in m["content"]
        if part.get("type") == "text" and "[1]:" in part["text"]
    )
    assert detect_kind("web", text)[0] == "web_elements"
    html = render_observation("web", text, {})
    assert (
        '<span class="ui-idx">1</span><span class="ui-class">&lt;button&gt;</span> <span class="ui-text">"Product"</span>'
        in html
    )
    assert html.count('class="ui-el"') >= 20


def test_inspect_accessibility_tree_is_nested(shared_data):
    log = json.loads(
        (shared_data / "web/inspect-ai-browser/2025-05-12T20-27-36-04-00_browser.json").read_text()
    )
    tool_msg = next(m for m in log["samples"][0]["messages"] if m["role"] == "tool")
    text = tool_msg["content"]
    assert detect_kind("web", text)[0] == "ax_tree"
    html = render_observation("web", text, {})
    # [142] banner holds [149] navigation which holds the "About us" link
    banner = html.index('<span class="ax-role ax-banner">banner</span>')
    nav = html.index('<span class="ax-role ax-navigation">navigation</span>', banner)
    about = html.index('"About us"', nav)
    assert banner < nav < about
    assert html[banner:about].count("<details open>") == 1  # the navigation's own details
    assert '<span class="ax-attrs">[url: https://www.aisi.gov.uk/about]</span>' in html


# ---------------------------------------------------------------- HTML


def test_html_observation_is_sandboxed_without_scripts_and_has_source():
    page = '<html><body><h1>Shop</h1><script>steal()</script><img src="https://t.example/p.gif"></body></html>'
    assert detect_kind("web", page)[0] == "html"
    html = render_observation("web", page, {})
    audit = audit_markup(html)
    assert len(audit.iframes) == 1
    frame = audit.iframes[0]
    assert frame["sandbox"] == ""
    assert page in frame["srcdoc"]  # the page, decoded from the escaped attribute
    assert "default-src 'none'" in frame["srcdoc"]  # nothing is fetched from inside the frame
    assert "<script>" not in html and "&lt;script&gt;steal()" in html
    assert "HTML source" in html


def test_text_that_merely_mentions_tags_is_not_html():
    assert detect_kind("web", "Use <div> for layout")[0] == "text"


# ---------------------------------------------------------------- actions, folding, previews


def test_tool_call_action_flat_arguments_inline():
    html = render_action(
        "mcp",
        json.dumps({"name": "get_user_details", "arguments": '{"user_id": "mia_li_3668"}'}),
        {},
    )
    assert '<span class="tool-name">get_user_details</span>' in html
    assert (
        '<span class="j-key">user_id</span>=<span class="j-val">&quot;mia_li_3668&quot;</span>'
        in html
    )


def test_tool_call_action_nested_arguments_as_tree():
    call = {
        "type": "function",
        "function": {"name": "book", "arguments": {"passengers": [{"first": "Mia"}]}},
    }
    html = render_action("mcp", json.dumps(call), {})
    assert '<span class="tool-name">book</span><div class="json-tree">' in html


def test_react_action_splits_thought_and_action():
    html = render_action(
        "android",
        'Reason: open the app\nAction: {"action_type": "open_app", "app_name": "Phone"}',
        {},
    )
    assert '<span class="react-label">Reason</span> open the app' in html
    assert '<span class="tool-name">open_app</span>' in html


def test_terminal_action_is_a_prompt_line():
    html = render_action("terminal", "ls -la\n", {})
    assert html == '<pre class="action action-cmd term"><span class="prompt">$ </span>ls -la</pre>'


def test_long_observations_are_folded_short_ones_not():
    short = render_observation("terminal", "ok", {})
    long = render_observation("terminal", "\n".join(f"line {i}" for i in range(200)), {})
    assert "data-fold" not in short
    assert "data-fold" in long and "Show all (200 lines" in long


def test_preview_shows_the_start_and_a_load_button():
    html = render_preview("terminal", "x" * 50_000, 120_000, "/steps/7/observation/")
    assert 'hx-get="/steps/7/observation/"' in html
    assert "of 117.2 KB" in html
    assert html.count("x") < 5000


def test_empty_content():
    assert "(empty)" in render_observation("web", "  ", {})
    assert "(no action)" in render_action("web", "", {})


def test_android_compact_element_lines_render_as_a_screen():
    text = (
        '[0] TextView "Create contact" bounds=(157,175)-(551,248)\n'
        '[1] ImageButton desc="Cancel" (clickable, long_clickable) bounds=(0,138)-(147,285) '
        "id=com.google.android.contacts:id/cancel\n"
        '[2] EditText "First name" (clickable, editable) bounds=(10,20)-(30,40)'
    )
    kind, elements = detect_kind("android", text)
    assert kind == "android" and len(elements) == 3
    html = render_observation("android", text, {})
    assert '<span class="ui-idx">1</span><span class="ui-class">ImageButton</span>' in html
    assert "desc: Cancel" in html and '<span class="chip">long-click</span>' in html
    assert (
        '<span class="chip">editable</span>' in html
        and '<span class="ui-res">cancel</span>' in html
    )
    assert "(0,138)–(147,285)" in html


def test_os_gui_calls_are_not_shown_as_shell_commands():
    from studio.rendering import render_action

    gui = str(render_action("os", 'double_click(item="report.pdf")', {}))
    assert 'class="prompt"' not in gui and "report.pdf" in gui
    shell = str(render_action("os", "ls -la ~/Documents", {}))
    assert 'class="prompt"' in shell


def test_fenced_actions_render_as_the_action_with_the_raw_text_a_click_away():
    from studio.rendering import render_action

    keys = '```json\n{"keystrokes": "grep -c ERROR /var/log/app.log\\n", "is_blocking": true}\n```'
    html = str(render_action("terminal", keys))
    assert '<span class="prompt">$ </span>grep -c ERROR /var/log/app.log</pre>' in html
    assert '<details class="raw-action"><summary>raw action</summary><pre>```json' in html
    several = '```json\n{"commands": [{"keystrokes": "cd /srv\\n"}, {"keystrokes": "C-c"}]}\n```'
    html = str(render_action("terminal", several))
    assert html.count('class="prompt"') == 2 and "</span>C-c</pre>" in html
    bash = "```bash\nss -ltnp | grep ':8080'\n```"
    html = str(render_action("terminal", bash))
    assert "</span>ss -ltnp | grep &#x27;:8080&#x27;</pre>" in html
    tool = '```json\n{"name": "get_weather", "arguments": {"city": "<Lyon>"}}\n```'
    html = str(render_action("mcp", tool))
    assert "get_weather" in html and "&lt;Lyon&gt;" in html and "<Lyon>" not in html
    # a block inside a block is unwrapped once: one raw view, the inner block as text
    nested = "```\n```bash\nrm -rf /tmp/x\n```\n```"
    html = str(render_action("terminal", nested))
    assert html.count("raw action") == 1 and "rm -rf /tmp/x" in html


def test_deeply_nested_json_observations_render_without_overflowing():
    from studio.rendering import render_observation

    for depth in (900, 5000):
        plain = "[" * depth + "]" * depth
        embedded = '{"result": "' + plain + '"}'
        for text in (plain, embedded):
            html = str(render_observation("mcp", text))
            assert "json-tree" in html or "[[[" in html
            assert len(html) < 200_000  # the deep rest is compact raw text
