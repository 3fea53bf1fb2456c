"""Diffs of meaning: JSON compared by structure, text without formatting; the raw diffs stay
one switch away."""

from __future__ import annotations

import json

from django.urls import reverse

from studio.presenters.diff import diff_excerpt_html, diff_html, meaning_html, text_excerpt_html
from studio.services.diffs import (
    JsonChange,
    json_changes,
    meaning_diff,
    meaning_key,
    meaning_similarity,
    normalise_text,
)
from tests.support.branching import MCP_STEPS, make_child, make_trajectory


def test_json_changes_name_paths_and_align_list_items():
    a = {"city": "Lyon", "temp_c": 14, "tags": ["a", "b"], "n": 1, "ok": True, "x y": 1}
    b = {"city": "Lyon", "temp_c": 15, "tags": ["z", "a", "b"], "n": 1.0, "ok": 1, "sky": None}
    assert json_changes(a, b) == [
        JsonChange('$["x y"]', "removed", old="1"),
        JsonChange("$.temp_c", "changed", old="14", new="15"),
        JsonChange("$.tags[0]", "added", new='"z"'),  # one insertion, not three changes
        JsonChange("$.ok", "changed", old="true", new="1"),  # true is not the number 1
        JsonChange("$.sky", "added", new="null"),
    ]
    assert json_changes([{"id": 1, "v": "a"}], [{"id": 1, "v": "b"}]) == [
        JsonChange("$[0].v", "changed", old='"a"', new='"b"')
    ]


def test_reformatting_is_no_change_and_real_changes_show():
    compact = '{"name":"get_weather","arguments":{"city":"Lyon"}}'
    pretty = json.dumps(json.loads(compact), indent=2)
    same = meaning_diff(compact, pretty)
    assert same.kind == "json" and same.same and same.formatting_only
    assert "only formatting differs" in str(meaning_html(same))
    assert meaning_similarity(compact, pretty) == 1.0
    assert meaning_key(compact) == meaning_key(pretty)
    changed = meaning_diff(compact, pretty.replace("Lyon", "Paris"))
    assert not changed.same
    html = str(meaning_html(changed))
    assert (
        "<code>$.arguments.city</code> changed <del>&quot;Lyon&quot;</del> → <ins>&quot;Paris"
        in html
    )

    text = meaning_diff("\ntotal 8\r\ndrwx  2 root\n\n", "total 8\ndrwx  2 root   ")
    assert text.kind == "text" and text.same and text.formatting_only
    # line ends only: indentation and spaces inside a line are kept (code, aligned output)
    assert normalise_text(" a \t b \r\n c  \n\n") == " a \t b\n c"
    assert not meaning_diff("if x:\n    y()", "if x:\n  y()").same
    words = meaning_diff("3 passed in 0.12s  ", "3 failed in 0.12s")
    assert ("delete", "passed") in words.pieces and ("insert", "failed") in words.pieces
    assert all(not t.endswith(" ") for op, t in words.pieces if op != "equal")


def test_user_text_is_escaped_in_change_lists():
    diff = meaning_diff('{"a": "<b>x</b>"}', '{"a": "<script>alert(1)</script>"}')
    html = str(meaning_html(diff))
    assert "<script>" not in html and "&lt;script&gt;" in html


def test_compare_shows_meaning_by_default_and_raw_text_on_request(researcher_client, project):
    t, root = make_trajectory(project, domain="mcp", steps=MCP_STEPS, key="mcp-diff")
    recorded = MCP_STEPS[1][1]  # {"time": "10:02"}
    reformatted = make_child(root, 1, [json.dumps(json.loads(recorded), indent=4)], name="R")
    changed = make_child(root, 1, ['{"time": "10:03"}'], name="C")
    url = reverse("branch_compare", args=[t.pk]) + f"?b={reformatted.pk}&b={changed.pk}"
    html = researcher_client.get(url).content.decode()
    row = html.split('id="compare-step-1"')[1]
    assert "Same value; only formatting differs." in row and "same meaning" in row
    assert "<code>$.time</code> changed <del>&quot;10:02&quot;</del>" in row
    raw = researcher_client.get(url + "&diff=lines").content.decode()
    assert "only formatting differs" not in raw and "<del>" in raw.split('id="compare-step-1"')[1]


def test_a_text_replaced_as_a_whole_is_one_replacement():
    diff = meaning_diff("Transfer successful", '{"reservation_id": "HATHAT"} error: not found')
    assert diff.pieces == [
        ("delete", "Transfer successful"),
        ("insert", '{"reservation_id": "HATHAT"} error: not found'),
    ]


def test_word_diffs_of_multi_line_texts_keep_their_lines():
    """A word diff shows lines as lines: a changed line is diffed word by word in place, lines
    replaced by more or fewer lines are whole lines removed then added, and lines removed then
    added never run on into each other, whatever the diff (words, lines, meaning)."""
    from studio.services.diffs import line_pieces, word_pieces

    recorded = "total 8\ndrwx 2 root root .\n-rw 1 root root notes.txt\nend"
    simulated = "total 12\ndrwx 2 root root .\n-rw 1 root root todo.md\n-rw 1 a b c.txt\nend"
    pieces = word_pieces(recorded, simulated)
    assert "".join(t for op, t in pieces if op != "delete") == simulated
    assert "".join(t for op, t in pieces if op != "insert") == recorded
    # no changed piece holds part of a line and part of another
    for op, text in pieces:
        if op != "equal" and "\n" in text.rstrip("\n"):
            assert text.endswith("\n"), (op, text)
    assert pieces[:3] == [("equal", "total "), ("delete", "8"), ("insert", "12")]
    assert ("delete", "-rw 1 root root notes.txt\n") in pieces  # 1 line became 2: whole lines
    assert ("insert", "-rw 1 root root todo.md\n-rw 1 a b c.txt\n") in pieces
    html = str(diff_html(pieces))
    lines = html.split("\n")
    assert lines[0] == "total <del>8</del><ins>12</ins>"
    assert lines[1] == "drwx 2 root root ."
    assert html.endswith("c.txt\n</ins>end")  # the last line is a line of its own
    # the last line replaced whole (no line end of its own): the added lines start a line
    whole = meaning_diff("alpha beta\ngamma", "one two\nthree four")
    assert str(meaning_html(whole)) == (
        '<pre class="diff"><del>alpha beta\ngamma</del>\n<ins>one two\nthree four</ins></pre>'
    )
    raw = line_pieces("a\nb", "a\nc\nd")
    assert str(diff_html(raw)) == "a\n<del>b</del>\n<ins>c\nd</ins>"
    assert "b</del>\n<ins>" in str(diff_excerpt_html(raw + [("equal", "x" * 500)], 10, 5))
    # one line stays inline
    one = str(diff_html(word_pieces("3 passed", "3 failed")))
    assert one == "3 <del>passed</del><ins>failed</ins>"


def test_long_repetitive_texts_diff_exactly_and_at_once():
    """Log lines repeated a thousand times with every other one changed: difflib's matcher
    took about 40 s on this; the LCS alignment is exact and immediate."""
    from studio.services.diffs import line_pieces, similarity, word_pieces

    line = "[00005] \x1b[32mINFO\x1b[0m worker processed item <5> in 12 ms & queued next\n"
    recorded = line * 1400
    changed = "".join(line.replace("INFO", "WARN") if k % 2 else line for k in range(1400))
    for pieces in (line_pieces(recorded, changed), word_pieces(recorded, changed)):
        assert "".join(t for op, t in pieces if op != "delete") == changed
        assert "".join(t for op, t in pieces if op != "insert") == recorded
    lines = line_pieces(recorded, changed)
    assert sum(t.count("\n") for op, t in lines if op == "insert") == 700  # only those
    assert similarity(recorded, changed) == 0.5  # 700 of 1400 lines on each side kept
    # texts that differ everywhere past the alignment bound are one replacement, unmeasured
    a = "".join(f"{k}\n" for k in range(0, 40_000, 2))
    b = "".join(f"{k}\n" for k in range(1, 40_000, 2))
    assert line_pieces(a, b) == [("delete", a), ("insert", b)]
    assert similarity(a, b) is None


def test_terminal_colours_are_no_change_of_meaning_and_do_not_show_as_escape_codes():
    """Colour codes are how a terminal paints its text, not what it says: two outputs that
    differ only in them mean the same, a diff of coloured output shows the words that
    changed without "[0;1;31m", still escaped; the raw diff keeps them out of sight too."""
    recorded = "\x1b[0;1;31m●\x1b[0m backup.service failed <disk>\nTriggeredBy: timer"
    simulated = "\x1b[0;1;32m●\x1b[0m backup.service ok <disk>\nTriggeredBy: timer"
    assert meaning_diff(recorded, recorded.replace("31m", "33m")).same
    diff = meaning_diff(recorded, simulated)
    assert not diff.same
    assert str(meaning_html(diff)) == (
        '<pre class="diff">● backup.service <del>failed</del><ins>ok</ins> &lt;disk&gt;\n'
        "TriggeredBy: timer</pre>"
    )
    assert "<del>failed</del>" in str(diff_excerpt_html(diff, 20, 5))
    raw = str(diff_html([("equal", "\x1b[0;1;"), ("delete", "31m"), ("equal", "● ok")]))
    assert "\x1b" not in raw and "&lt;" not in raw
    excerpt = str(text_excerpt_html(recorded, None))
    assert excerpt == "<pre>● backup.service failed &lt;disk&gt;\nTriggeredBy: timer</pre>"
