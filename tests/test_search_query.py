"""The search query language (`studio.search.query`): terms, fields, errors with columns."""

from __future__ import annotations

import pytest

from studio.search.query import FilterTerm, QueryError, RegexTerm, TextTerm, parse, tokens_of


def test_words_phrases_prefixes_and_exclusions():
    q = parse('Needle "file not found" pref* -noise -"bad thing"')
    assert q.text == (
        TextTerm(("needle",)),
        TextTerm(("file", "not", "found")),
        TextTerm(("pref",), prefix=True),
        TextTerm(("noise",), negated=True),
        TextTerm(("bad", "thing"), negated=True),
    )
    assert [t.words for t in q.positive_text] == [("needle",), ("file", "not", "found"), ("pref",)]


def test_punctuated_words_split_like_the_index():
    assert tokens_of("foo_bar /usr/bin/ls É.x") == ["foo", "bar", "usr", "bin", "ls", "é", "x"]
    assert parse("os.path.join").text == (TextTerm(("os", "path", "join")),)
    # a quoted star is text, not a prefix
    assert parse('"ab*"').text == (TextTerm(("ab",)),)


def test_fields_and_filters():
    q = parse(
        'action:"rm -rf" observation:err* domain:WEB source:simulated model:Qwen3 '
        "perturbation:drop-line verdict:reject -source:episode"
    )
    assert q.text == (
        TextTerm(("rm", "rf"), field="action"),
        TextTerm(("err",), prefix=True, field="observation"),
    )
    assert q.filters == (
        FilterTerm("domain", "web"),
        FilterTerm("source", "simulated"),
        FilterTerm("model", "Qwen3"),
        FilterTerm("perturbation", "drop-line"),
        FilterTerm("verdict", "reject"),
        FilterTerm("source", "episode", negated=True),
    )


def test_regex_with_slashes_and_flags():
    q = parse(r"re:/a\/b+c/i -re:/^x/")
    assert q.regexes == (
        RegexTerm("a/b+c", ignore_case=True),
        RegexTerm("^x", negated=True),
    )
    assert q.regexes[0].compiled().search("xA/BBC")


@pytest.mark.parametrize(
    ("text", "message", "column"),
    [
        ('ok "unclosed', "unclosed quote", 4),
        ("a color:red", "unknown field 'color'", 3),
        ("domain:mars", "domain:mars is not one of", 8),
        ("source:played", "source:played is not one of", 8),
        ("verdict:maybe", "verdict:maybe is not one of", 9),
        ("x re:/(a/", "bad regular expression: missing )", 9),
        ("re:/a{99999999999}/", "bad regular expression: repeat count too big", 7),
        ("re:/abc", "unclosed regular expression", 4),
        ("re:abc", "pattern between slashes", 4),
        ("re:/a/x", "unexpected text after", 7),
        ("action: x", "action: has no value", 1),
        ("fine ...", "has no letters or digits", 6),
        ('ab"c', "a quote inside a word", 3),
    ],
)
def test_bad_input_names_what_and_where(text, message, column):
    with pytest.raises(QueryError) as caught:
        parse(text)
    assert message in caught.value.message
    assert caught.value.column == column
    assert f"(column {column})" in str(caught.value)


def test_empty_query_and_term_limit():
    assert parse("   ").is_empty
    with pytest.raises(QueryError, match="more than 32 terms"):
        parse(" ".join(f"w{i}" for i in range(40)))
