"""The branch tree layout and figure, and the diff helpers of compare (plain Python)."""

import random

from django.utils.safestring import SafeData

from studio.presenters.diff import diff_html
from studio.services.branches import TreeNode, layout_tree, shared_prefix_length
from studio.services.diffs import WORD_DIFF_LIMIT, line_pieces, similarity, word_pieces


def random_tree(n, seed=0):
    rng = random.Random(seed)
    nodes = [TreeNode(pk=1, parent_id=None, fork_index=0, own_steps=20)]
    for pk in range(2, n + 1):
        parent = rng.choice(nodes)
        fork = rng.randint(0, parent.fork_index + parent.own_steps)
        nodes.append(
            TreeNode(pk=pk, parent_id=parent.pk, fork_index=fork, own_steps=rng.randint(0, 5))
        )
    rng.shuffle(nodes)
    return nodes


def subtree(nodes, pk):
    kids = {}
    for n in nodes:
        kids.setdefault(n.parent_id, []).append(n.pk)
    out, stack = [], [pk]
    while stack:
        cur = stack.pop()
        out.append(cur)
        stack.extend(kids.get(cur, []))
    return out


def test_layout_gives_every_branch_its_own_row_and_fork_step_as_x():
    nodes = random_tree(200)
    ordered = layout_tree(nodes)
    assert [n.y for n in ordered] == list(range(200))
    assert all(n.x == n.fork_index for n in ordered)
    assert ordered[0].pk == 1 and ordered[0].depth == 0


def test_layout_subtrees_are_contiguous_bands_below_their_root():
    nodes = random_tree(200, seed=3)
    ordered = layout_tree(nodes)
    row = {n.pk: n.y for n in ordered}
    for n in ordered:
        rows = sorted(row[pk] for pk in subtree(nodes, n.pk))
        assert rows == list(range(n.y, n.y + len(rows))), n.pk
        if n.parent_id:
            assert row[n.parent_id] < n.y
            assert n.depth == next(p for p in ordered if p.pk == n.parent_id).depth + 1


def test_layout_orders_siblings_by_fork_step_then_sample():
    nodes = [
        TreeNode(pk=1, parent_id=None, fork_index=0, own_steps=9),
        TreeNode(pk=2, parent_id=1, fork_index=5, sample_index=1),
        TreeNode(pk=3, parent_id=1, fork_index=2),
        TreeNode(pk=4, parent_id=1, fork_index=5, sample_index=0),
        TreeNode(pk=5, parent_id=3, fork_index=4),
    ]
    assert [n.pk for n in layout_tree(nodes)] == [1, 3, 5, 4, 2]


def test_layout_survives_deep_chains_and_orphans():
    chain = [TreeNode(pk=1, parent_id=None, fork_index=0)]
    chain += [TreeNode(pk=i, parent_id=i - 1, fork_index=i) for i in range(2, 5001)]
    ordered = layout_tree(chain)
    assert ordered[-1].depth == 4999
    orphan = layout_tree([TreeNode(pk=7, parent_id=99, fork_index=3)])
    assert orphan[0].y == 0


def test_word_diff_marks_changes_and_escapes():
    html = str(diff_html(word_pieces("the cat sat", "the <b>dog</b> sat")))
    assert "<del>cat</del>" in html
    assert "<ins>&lt;b&gt;dog&lt;/b&gt;</ins>" in html
    assert "<b>" not in html
    assert str(diff_html(word_pieces("same", "same"))) == "same"


def test_line_diff_and_similarity():
    html = str(diff_html(line_pieces("a\nb\nc\n", "a\nB\nc\n")))
    assert "<del>b\n</del><ins>B\n</ins>" in html
    assert similarity("x y z", "x y z") == 1.0
    assert 0 < similarity("one two three", "one two four") < 1
    big = "line <x>\n" * 4000
    assert len(big) * 2 > WORD_DIFF_LIMIT
    assert "&lt;x&gt;" in str(diff_html(word_pieces(big, big + "extra\n")))  # falls back to lines
    assert word_pieces(big, big + "extra\n") == line_pieces(big, big + "extra\n")


def test_diff_pieces_are_plain_data():
    """The service returns (op, text) pieces of plain str: no HTML, no SafeString."""
    pieces = word_pieces("the cat sat", "the <b>dog</b> sat")
    assert pieces == [
        ("equal", "the "),
        ("delete", "cat"),
        ("insert", "<b>dog</b>"),
        ("equal", " sat"),
    ]
    assert line_pieces("a\nb\nc\n", "a\nB\nc\n") == [
        ("equal", "a\n"),
        ("delete", "b\n"),
        ("insert", "B\n"),
        ("equal", "c\n"),
    ]
    for op, text in pieces + line_pieces("<x>\n", "<y>\n"):
        assert op in {"equal", "delete", "insert"}
        assert type(text) is str and not isinstance(text, SafeData)
    assert word_pieces("", "") == [] and line_pieces("same", "same") == [("equal", "same")]


def test_presenter_escapes_script_in_both_diff_modes():
    evil = "<script>alert('x & y')</script>"
    for html in (
        diff_html(word_pieces("ok <script>old()</script>", "ok " + evil)),
        diff_html(line_pieces("ok\n<script>old()</script>\n", "ok\n" + evil + "\n")),
        diff_html([("equal", evil), ("delete", evil), ("insert", evil)]),
    ):
        assert isinstance(html, SafeData)
        assert "<script" not in html and "</script" not in html
        assert "&lt;script&gt;" in html
        assert "<del>" in html and "<ins>" in html
        assert "&amp;" in html and "&#x27;" in html
    assert str(diff_html(line_pieces("a\n", evil + "\n"))) == (
        "<del>a\n</del><ins>&lt;script&gt;alert(&#x27;x &amp; y&#x27;)&lt;/script&gt;\n</ins>"
    )


def test_shared_prefix_from_lineages():
    root = [[1, 0]]
    a = [[1, 0], [2, 5]]
    b = [[1, 0], [3, 5]]
    c = [[1, 0], [2, 5], [4, 7]]
    assert shared_prefix_length([a, b]) == 5
    assert shared_prefix_length([a, c]) == 7
    assert shared_prefix_length([root, a]) == 5
    assert shared_prefix_length([[[1, 0], [3, 2]], a]) == 2


def test_split_stream_tolerates_half_written_answers():
    from studio.templatetags.branching_tags import split_stream

    assert split_stream("") == ("", "")
    assert split_stream("<think>weighing opt") == ("weighing opt", "")
    assert split_stream("<think>a</think>\n<predicted_observation>\nls out") == ("a", "ls out")
    assert split_stream("<think>a</think><predicted_observation>x</predicted_observation>") == (
        "a",
        "x",
    )
    assert split_stream("no tags at all") == ("no tags at all", "")
    assert split_stream("<thi") == ("", "")
    assert split_stream("<think>a</think><predicted_obs") == ("a", "")
    assert split_stream("<think>a</think><predicted_observation>x</predic") == ("a", "x")
    assert split_stream("a < b") == ("a < b", "")


def test_stream_parts_labels_untagged_output_as_plain():
    from studio.templatetags.branching_tags import stream_parts

    assert stream_parts("<thi") == {"thinking": "", "observation": "", "plain": ""}
    assert stream_parts("total 0\n") == {"thinking": "", "observation": "", "plain": "total 0"}
    assert stream_parts("<think>hm")["thinking"] == "hm"
