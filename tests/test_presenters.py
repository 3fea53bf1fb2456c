"""The services hand plain data to `studio.presenters`, which makes the HTML and figures."""

import ast
from pathlib import Path

from django.urls import reverse
from django.utils.safestring import SafeData

from studio.models import Trajectory
from studio.presenters.diff import diff_html
from studio.presenters.tree import LABEL_LIMIT, build_tree_figure, node_label, plotly_text
from studio.services.branches import TreeNode
from studio.services.compare import build_comparison
from tests.support.branching import make_child, make_trajectory

SERVICES = Path(__file__).resolve().parents[1] / "studio" / "services"


def test_branch_services_import_no_presentation():
    tree = ast.parse((SERVICES / "branches.py").read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module)
            imported.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            imported.update(a.name for a in node.names)
    for banned in ("django.utils.html", "django.utils.safestring", "django.urls", "plotly"):
        assert not any(name.startswith(banned) for name in imported), banned
    assert not any(name.startswith("studio.presenters") for name in imported)


def test_build_comparison_returns_plain_diff_pieces(project):
    t, root = make_trajectory(project)
    a = make_child(root, 2, ["3 passed <script>x()</script>", "same"], name="A")
    b = make_child(root, 2, ["1 failed", "other"], name="B", action="rm -rf <dir>")
    for mode in ("words", "lines"):
        comparison = build_comparison(t, [a, b], diff=mode)
        rows = [row for row in comparison.window.items if row.kind == "row"]
        cells = [cell for row in rows for cell in row.cells]
        diffs = [cell.observation_diff for cell in cells if cell.observation_diff is not None]
        diffs += [cell.action_diff for cell in cells if cell.action_diff is not None]
        assert diffs
        for pieces in diffs:
            assert isinstance(pieces, list)
            for op, text in pieces:
                assert op in {"equal", "delete", "insert"}
                assert type(text) is str and not isinstance(text, SafeData)
        first = rows[0].cells[0]
        assert any(op == "insert" and "<script>" in text for op, text in first.observation_diff)
        assert "<script>" not in diff_html(first.observation_diff)
    b_cell = rows[0].cells[1]
    assert b_cell.action_diff is not None
    assert "&lt;dir&gt;" in diff_html(b_cell.action_diff)


def test_tree_figure_from_plain_nodes_escapes_names():
    nodes = [
        TreeNode(pk=1, parent_id=None, fork_index=0, own_steps=5, name="<b>root</b>"),
        TreeNode(pk=2, parent_id=1, fork_index=2, own_steps=1, name="x & y", starred=True),
    ]
    fig = build_tree_figure(Trajectory(pk=7), current_id=2, nodes=nodes)
    markers = next(tr for tr in fig["data"] if tr["name"] == "branches")
    page = reverse("trajectory", args=[7])
    assert markers["customdata"] == [f"{page}?branch=1", f"{page}?branch=2&step=2"]
    assert "<b>&lt;b&gt;root&lt;/b&gt;</b>" in markers["hovertext"][0]
    assert "x &amp; y" in markers["hovertext"][1]
    assert fig["meta"] == {"branches": 2, "nodes": 2, "groups": 0, "current": 2}
    labels = next(tr for tr in fig["data"] if tr["name"] == "labels")
    assert labels["text"][1] == "\u2002" + plotly_text(node_label(nodes[1]))
    many = [TreeNode(pk=i, parent_id=None if i == 1 else 1, fork_index=0) for i in range(1, 50)]
    assert len(many) > LABEL_LIMIT
    assert all(
        tr["name"] != "labels" for tr in build_tree_figure(Trajectory(pk=7), nodes=many)["data"]
    )


def test_excerpts_of_long_diffs_and_texts_escape_and_count_what_they_cut():
    from studio.presenters.diff import pieces_excerpt_html, text_excerpt_html

    evil = "<script>alert('x')</script>"
    pieces = [("equal", evil + "a" * 5000), ("delete", evil), ("insert", "b" * 9000 + evil)]
    html = str(pieces_excerpt_html(pieces, 2000))
    assert "<script" not in html and "&lt;script&gt;" in html
    assert f"… {5000 + len(evil) - 160:,} unchanged characters …" in html  # 160 kept
    assert "<del>&lt;script&gt;" in html and "more characters added" in html
    assert str(pieces_excerpt_html(pieces[:2], 10**6)) == str(diff_html(pieces[:2]))  # fits
    text = str(text_excerpt_html(evil * 100, 50))
    assert text.startswith("<pre>&lt;script&gt;") and "<script" not in text
    assert f"… {len(evil) * 100 - 50:,} more characters" in text
    assert (
        str(text_excerpt_html(evil, 50))
        == "<pre>&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;</pre>"
    )
