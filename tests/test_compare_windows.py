"""The comparison in windows (`studio.services.compare`): which steps are rows, which fold
into runs, what a window reads, and where the next one starts."""

from __future__ import annotations

from studio.services import compare
from studio.services.compare import Budget, CompareRun, build_rows, scan_window, start_comparison
from tests.support.branching import make_child, make_trajectory


def _long(project, n=60):
    steps = [(f"cmd {i}", f"out {i}") for i in range(n)]
    return make_trajectory(project, steps=steps, key=f"long{n}")


def _layout(window) -> list:
    return [
        (item.start, item.end) if isinstance(item, CompareRun) else item.index
        for item in window.items
    ]


def test_identical_steps_fold_and_only_equal_lengths_are_read(project):
    t, root = _long(project)
    # own copies of the recorded steps, except 20 (same length, other text) and 30 (longer)
    a = make_child(root, 10, [f"out {i}" if i != 20 else "OUT 20" for i in range(10, 60)])
    b = make_child(root, 10, [f"out {i}" if i != 30 else "longer 30" for i in range(10, 60)])
    cmp = start_comparison(t, [a, b], diff="meaning")
    assert cmp.shared_until == 10 and cmp.last == 59
    same, empty, read = compare._identical_indexes(cmp, 10, 59)
    assert empty == set()
    assert same == set(range(10, 60)) - {20, 30}
    # both copies of each step whose lengths agree (action and observation); not step 30
    assert read == sum(2 * (len(f"cmd {i}") + len(f"out {i}")) for i in range(10, 60) if i != 30)
    window = scan_window(cmp, 10)
    assert _layout(window) == [(10, 19), 20, (21, 29), 30, (31, 59)]
    assert window.next_start is None and window.open_run is None
    # steps inherited by both (one Step row) are identical without reading a text
    c = make_child(root, 40, ["c"])
    d = make_child(root, 40, ["d"])
    inherited = start_comparison(t, [a, c], diff="meaning")
    assert compare._identical_indexes(start_comparison(t, [c, d], diff="meaning"), 0, 39) == (
        set(range(40)),
        set(),
        0,
    )
    assert _layout(scan_window(inherited, 10))[:3] == [(10, 19), 20, (21, 39)]


def test_a_missing_step_is_a_row_and_a_run_goes_on_across_windows(project):
    t, root = _long(project)
    a = make_child(root, 10, [f"out {i}" for i in range(10, 60)])
    b = make_child(root, 10, [f"out {i}" for i in range(10, 50)])  # ends at 49
    cmp = start_comparison(t, [a, b], diff="meaning")
    # a budget of 100 bytes read: each window reads one chunk, and the run goes on in the next
    small = Budget(read_bytes=100)
    first = scan_window(cmp, 10, budget=small)
    assert first.items == [] and first.open_run == 10
    assert first.next_start == 10 + compare.SCAN_CHUNK
    window, windows = first, 1
    while window.next_start is not None:
        window = scan_window(cmp, window.next_start, open_run=window.open_run, budget=small)
        windows += 1
    assert windows > 1
    assert _layout(window) == [(10, 49), *range(50, 60)]
    assert window.items[1].cells[0].step.index == 50
    assert window.items[1].cells[1].step is None  # B has no step 50
    # the same in one window with the default budget
    assert _layout(scan_window(cmp, 10)) == [(10, 49), *range(50, 60)]


def test_rows_stop_at_the_window_limit_and_past_the_bytes_to_diff(project):
    t, root = _long(project)
    a = make_child(root, 5, [f"alt {i}" for i in range(5, 60)])
    b = make_child(root, 5, [f"other {i}" for i in range(5, 60)])
    cmp = start_comparison(t, [a, b], diff="meaning")
    window = scan_window(cmp, 5, budget=Budget(rows=4))
    assert _layout(window) == [5, 6, 7, 8] and window.next_start == 9
    # rows are built while the texts diffed so far are under the budget
    cost = sum(cell.diffed for cell in build_rows(cmp, [5])[0].cells)
    # each cell: its step's action and observation, and the recorded step's
    assert cost == len("cmd 5alt 5cmd 5out 5") + len("cmd 5other 5cmd 5out 5")
    rows = build_rows(cmp, range(5, 15), diff_chars=2 * cost + 1)
    assert [r.index for r in rows] == [5, 6, 7]
    # the first row is built whatever the budget, and the rest goes to the next window
    tight = scan_window(cmp, 5, budget=Budget(diff_chars=1))
    assert _layout(tight) == [5] and tight.next_start == 6 and tight.open_run is None
    cell = rows[0].cells[1]
    assert cell.reference == "recorded" and not cell.same and cell.ratio is not None


def test_steps_no_selected_branch_has_are_no_rows(project, researcher_client):
    """A gap in every compared branch (steps 4-5 here) is no row at all, neither a row of
    empty cells nor part of a run of identical steps; a step only one branch lacks is a row
    whose cell for it is empty, with no filler text."""
    from django.urls import reverse

    from studio.models import Step

    t, root = make_trajectory(project, key="gaps")  # recorded: steps 0-4
    a = make_child(root, 2, ["a2", "same 3"], name="A")
    b = make_child(root, 2, ["b2", "same 3"], name="B")
    for branch, text in ((a, "a6"), (b, "b6")):
        Step.objects.create(branch=branch, index=6, action="act6", observation=text)
    Step.objects.create(branch=a, index=7, action="act7", observation="only A")
    cmp = start_comparison(t, [a, b], diff="meaning")
    window = scan_window(cmp, cmp.shared_until)
    assert _layout(window) == [2, (3, 3), 6, 7]
    assert window.items[-1].cells[1].step is None  # B has no step 7: an empty cell
    # a window over the gap alone (an opened run ending there) builds nothing and ends
    gap = compare.run_window(cmp, 4, 5)
    assert gap.items == [] and gap.next_start is None
    assert compare.compare_row(cmp, 5) is None
    html = researcher_client.get(
        reverse("branch_compare", args=[t.pk]) + f"?b={a.pk}&b={b.pk}"
    ).content.decode()
    assert 'id="compare-step-6"' in html and 'id="compare-step-4"' not in html
    assert 'id="compare-step-5"' not in html and "no step" not in html
    row7 = html.split('id="compare-step-7"')[1].split("</tr>")[0]
    assert row7.count('class="compare-cell') == 2 and "compare-cell no-step" in row7
