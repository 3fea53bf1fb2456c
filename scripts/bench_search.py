#!/usr/bin/env python
"""Step search benchmark (not a test): first-page times, index size and write cost per step.

Time to the first page of step hits on a large library, the index's size and the write cost
the index adds per step, on PostgreSQL and on SQLite.

PostgreSQL: builds (or reuses, see --rebuild) a database of its own, `bench_search` (--pg-db),
migrated with the studio's migrations, holding a project of --steps steps (default 1,000,000)
and a second project of a hundredth of that (the project filter has something to leave out).
Steps are about 2 KB of action and observation, generated deterministically (--seed) for the
7 domains from domain templates (shell commands and their output, tracebacks and test runs,
JSON tool calls and results, HTML-ish pages, Android view trees, search results) filled with
words drawn from a Zipf-like vocabulary, with error messages at realistic rates and a tail
of rare words: so "common", "rare" and "phrase" queries mean something. Trajectories of 20-50
recorded steps; about one in four has a simulated future (a child branch of replayed actions
and simulated observations, from a SimulationJob of one of three models), one in twelve a
perturbed one, one in thirty is an episode, and one step in a hundred has an annotation.
Steps go in with COPY, the search index is built once after them (as the migration defines
it), then VACUUM ANALYZE.

It then times the real `studio.search.service.search_steps` (page 1, 25 hits) for sets of
common, medium, rare and phrase queries (--queries distinct queries a class, --reps timed
runs of each after one untimed first run, reported apart as the cold-ish run), for the
relevance and newest sorts, plus filtered and prefix queries: p50 and p95 of each set against
the goals (p50 under 300 ms, p95 under 1 s), with how the time splits between the page's
query, the count, the title matches and the rest (reading the hits, snippets), and how many
steps hold each query (counted apart, untimed). Then the index's size (the GIN index, the
tsvector column's stored bytes, against the table) and the write cost. An import writes its
steps unindexed and a worker indexes them right after the commit (`studio.search.indexer`):
a generated file (--write-steps steps) is imported with the studio's import code
(`do_import_file`, COPY) into a scratch database (`<pg-db>_write`, dropped at the end) with
the search objects, then indexed as the worker does (`index_pending`, timed apart); without
them (dropped); and with them indexing every step as it is written (`defer_search_index=
False`, what 0022 did: for comparison); and the same rows with a plain COPY, each
--write-reps times in turns after a CHECKPOINT. The import's ratio is held against the goal
(at most 20% slower). The same into the big library itself (--library-write-steps, inside a
transaction rolled back, the search objects dropped in it for the run without; VACUUM after)
shows the cost against a large index. The search column, indexes and triggers dropped and
made again are read from the catalog, so a changed migration is measured as it is.

SQLite: the same at --sqlite-steps steps (default 100,000) in `var/bench-search.sqlite3`
(FTS5, triggers), reused likewise, and its write cost in a scratch file.

Prints everything; the exit status is 1 on a FAIL only with --strict. A library of another
size than asked is refused (--rebuild builds it again). Here (2 cores, shared): building
1,000,000 steps took 14 min (rows 8, GIN index 6), a run reusing it 20 min for PostgreSQL
(10 of them the write cost; --skip-write leaves it out) and 4 for SQLite.

    python scripts/bench_search.py                       # both, full size
    python scripts/bench_search.py --only pg --reps 3 --skip-write   # reuse the database
    python scripts/bench_search.py --only sqlite
    python scripts/bench_search.py --write-only          # the write cost alone
    python scripts/bench_search.py --steps 50000 --pg-db bench_search_small --explain

PostgreSQL is reached at BENCH_PG_URL, else DATABASE_URL when it names PostgreSQL, else
postgres://postgres@127.0.0.1:5432 (its database name is replaced by --pg-db).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parents[1]
GENERATOR = 1  # bump when the generated library changes: a kept database is then rebuilt
GOAL_P50_S = 0.300
GOAL_P95_S = 1.0
GOAL_WRITE_RATIO = 1.20
PER_PAGE = 25
SORTS = ("relevance", "newest")
PROJECT = "bench-search"
OTHER_PROJECT = "bench-search-other"
INFO_TABLE = "bench_search_info"


# ---- the generated library ------------------------------------------------------------------

COMMON = """the to of and a in is for on that with it as be this by from at or are not an was
if can no error file data value user request response status true false null none new get set
run test tests build config server client path name type id list item key time line code
message output input result return function class module import package version update
create delete read write open close start stop check load save send find search query page
table index field count size default local remote host port service process system log info
warning debug failed success done ok timeout retry connection network access denied
permission token session cache memory disk cpu thread task job queue event handler api
url http https json html text string number object array format parse call method args
options param params source target branch commit merge repo main master origin head diff patch
change changes fix issue bug report expected actual assert should must will has have had
been were which when where what how all any each one two three first last next previous
after before then else only also more less than up down out into over under between about
""".split()

PSEUDO_ONSETS = "b br c ch d dr f fl g gr h j k kl l m n p pl qu r s sh sl st t tr v w z".split()
PSEUDO_VOWELS = "a e i o u ai ea io ou ei".split()
PSEUDO_CODAS = ["", "", "n", "r", "s", "t", "l", "m", "x", "nd", "rt", "ck"]

DOMAIN_NAMES = ("mcp", "search", "terminal", "swe", "android", "web", "os")
SERVICES = "nginx postgres redis api worker scheduler billing auth gateway indexer mailer".split()
DIRS = "/srv/app /var/log /etc/nginx /home/dev/project /opt/tools /tmp/build /usr/local/lib".split()
EXTS = "py js ts json yaml toml md txt log conf sh sql html css go rs".split()
PACKAGES = "core utils api models views services tasks cli storage auth parser".split()
EXCEPTIONS = (
    "ValueError KeyError TypeError AttributeError RuntimeError AssertionError "
    "IndexError FileNotFoundError ConnectionError PermissionError"
).split()
WIDGETS = "TextView Button EditText ImageView RecyclerView LinearLayout Switch CheckBox".split()
APPS = "settings contacts gallery calendar messages maps notes clock files shop".split()
SITES = (
    "docs.example.org shop.example.com wiki.example.net news.example.io forum.example.dev".split()
)
TOOLS = "read_file list_dir search_issues create_ticket get_weather query_db send_email".split()
MODELS = ("qwen3-8b", "Qwen/Qwen-AgentWorld-35B-A3B", "gpt-4o-mini")
PERTURBATIONS = ("tool_error", "timeout", "rate_limit", "permission_denied", "drop-line")
SOURCE_FORMATS = ("agentworldbench", "agentworld-studio/v1", "openhands", "swe-agent", "inspect")

# (template, weight): error lines put in about one step in four; their words are the phrases
ERRORS = [
    ("cat: {path}: No such file or directory", 8),
    ("bash: {path}: Permission denied", 5),
    ("curl: (7) Failed to connect to localhost port {port}: Connection refused", 4),
    ("bash: {word}: command not found", 3),
    ("ModuleNotFoundError: No module named '{word}'", 3),
    ("TimeoutError: the operation timed out after {n} seconds", 3),
    ("HTTP/1.1 404 Not Found", 3),
    ("HTTP/1.1 500 Internal Server Error", 2),
    ("error: rate limit exceeded, retry after {n} seconds", 2),
    ("Segmentation fault (core dumped)", 1),
    ("fatal: not a git repository (or any of the parent directories): .git", 1),
    ("java.lang.OutOfMemoryError: Java heap space", 1),
    ("E: Unable to locate package {word}", 1),
]


def _pseudo_words(rng: random.Random, count: int, syllables: tuple[int, int], taken: set[str]):
    out: list[str] = []
    while len(out) < count:
        word = "".join(
            rng.choice(PSEUDO_ONSETS) + rng.choice(PSEUDO_VOWELS) + rng.choice(PSEUDO_CODAS)
            for _ in range(rng.randint(*syllables))
        )
        if word not in taken:
            taken.add(word)
            out.append(word)
    return out


class Corpus:
    """Deterministic text by seed: words from a Zipf-like vocabulary (common English and
    programming words first, then 60,000 made-up words), a tail of 3,000 rare words (one step
    in 25 holds one of them), domain templates and error messages."""

    VOCAB = 60_000
    RARE = 3_000
    RARE_RATE = 0.04

    def __init__(self, seed: int):
        import numpy as np

        self.seed = seed
        words_rng = random.Random(seed)
        taken = set(COMMON)
        self.vocab = list(dict.fromkeys(COMMON)) + _pseudo_words(
            words_rng, self.VOCAB, (2, 3), taken
        )
        self.rare = _pseudo_words(words_rng, self.RARE, (4, 4), taken)
        ranks = np.arange(1, len(self.vocab) + 1, dtype=np.float64)
        weights = 1.0 / (ranks + 2.7) ** 1.07
        self._cdf = np.cumsum(weights) / weights.sum()
        self._vocab = np.array(self.vocab, dtype=object)
        self._np = np.random.default_rng(seed)
        self.r = random.Random(seed + 1)
        self._words: list[str] = []
        self._pos = 0
        self.error_templates = [t for t, _ in ERRORS]
        self.error_weights = [w for _, w in ERRORS]

    # words
    def words(self, k: int) -> list[str]:
        if self._pos + k > len(self._words):
            draw = self._np.random(1 << 20)
            self._words = self._vocab[self._cdf.searchsorted(draw)].tolist()
            self._pos = 0
        out = self._words[self._pos : self._pos + k]
        self._pos += k
        return out

    def prose(self, low: int, high: int) -> str:
        return " ".join(self.words(self.r.randint(low, high)))

    def word(self) -> str:
        return self.words(1)[0]

    def hexid(self, digits: int = 8) -> str:
        return f"{self.r.getrandbits(digits * 4):0{digits}x}"

    def path(self) -> str:
        r = self.r
        return f"{r.choice(DIRS)}/{self.word()}/{self.word()}.{r.choice(EXTS)}"

    def error(self) -> str:
        template = self.r.choices(self.error_templates, self.error_weights)[0]
        return template.format(
            path=self.path(), port=self.r.choice((80, 443, 5432, 6379, 8000, 8080)),
            word=self.word(), n=self.r.randint(1, 120),
        )  # fmt: skip

    def timestamp(self) -> str:
        r = self.r
        return (
            f"2025-{r.randint(1, 12):02d}-{r.randint(1, 28):02d}T{r.randint(0, 23):02d}:"
            f"{r.randint(0, 59):02d}:{r.randint(0, 59):02d}.{r.randint(0, 999):03d}Z"
        )

    # a step
    def step(self, domain: str) -> tuple[str, str]:
        """(action, observation) of one step of `domain`: about 2 KB together."""
        action, header, line = DOMAIN_TEXT[domain]
        r = self.r
        act = action(self)
        target = int(min(9000, max(250, r.lognormvariate(7.42, 0.55))))  # median ~1.7 KB
        lines = [header(self)]
        size = len(lines[0])
        while size < target:
            text = line(self)
            lines.append(text)
            size += len(text) + 1
        if r.random() < 0.25:
            lines.insert(r.randint(1, len(lines)), self.error())
        if r.random() < self.RARE_RATE:
            at = r.randint(1, len(lines))
            lines[at - 1] += " " + r.choice(self.rare)
        return act, "\n".join(lines)

    def title(self, domain: str) -> str:
        return f"{domain}: {self.prose(4, 8)}"

    def task(self) -> str:
        return self.prose(12, 30).capitalize() + "."


# each domain: (action, the observation's first line, one more line of the observation)
def _terminal_action(c: Corpus) -> str:
    r = c.r
    return r.choice(
        (
            lambda: f"ls -la {r.choice(DIRS)}/{c.word()}",
            lambda: f"cat {c.path()}",
            lambda: f'grep -rn "{c.word()} {c.word()}" {r.choice(DIRS)}',
            lambda: f"systemctl status {r.choice(SERVICES)}.service --no-pager",
            lambda: (
                f"journalctl -u {r.choice(SERVICES)} --since -1h | tail -n {r.randint(10, 200)}"
            ),
            lambda: f"docker logs {r.choice(SERVICES)}-{r.randint(1, 9)} --tail 100",
            lambda: f"python3 {c.path()} --{c.word()} {r.randint(1, 99)}",
            lambda: (
                f"curl -s http://localhost:{r.choice((8000, 8080, 9200))}/{c.word()}/{c.word()}"
            ),
            lambda: f"find {r.choice(DIRS)} -name '*.{r.choice(EXTS)}' -mtime -{r.randint(1, 30)}",
        )
    )()


def _terminal_header(c: Corpus) -> str:
    return f"$ cd {c.r.choice(DIRS)} && exit_code=$?"


def _terminal_line(c: Corpus) -> str:
    r = c.r
    kind = r.random()
    if kind < 0.35:
        return (
            f"-rw-r--r-- 1 dev dev {r.randint(100, 99999):>6} Mar {r.randint(1, 28):>2} "
            f"{r.randint(0, 23):02d}:{r.randint(0, 59):02d} {c.word()}_{c.word()}.{r.choice(EXTS)}"
        )
    level = r.choice(("INFO", "INFO", "INFO", "WARN", "DEBUG", "ERROR"))
    return f"{c.timestamp()} {level} [{r.choice(SERVICES)}] {c.prose(5, 14)}"


def _swe_action(c: Corpus) -> str:
    r = c.r
    mod = f"{r.choice(PACKAGES)}/{c.word()}"
    return r.choice(
        (
            lambda: f"str_replace_editor view /repo/src/{mod}.py",
            lambda: f"python -m pytest tests/test_{c.word()}.py -x -q -k {c.word()}",
            lambda: f"git diff HEAD~1 -- src/{mod}.py",
            lambda: f'grep -rn "def {c.word()}_{c.word()}" /repo/src',
            lambda: (
                f"str_replace_editor str_replace /repo/src/{mod}.py --old_str "
                f"'return {c.word()}' --new_str 'return self.{c.word()}({c.word()})'"
            ),
        )
    )()


def _swe_header(c: Corpus) -> str:
    return f"commit {c.hexid(40)}"


def _swe_line(c: Corpus) -> str:
    r = c.r
    kind = r.random()
    n = r.randint(1, 900)
    if kind < 0.3:
        return f"{n:>6}\t    def {c.word()}_{c.word()}(self, {c.word()}, {c.word()}=None):"
    if kind < 0.55:
        return f"{n:>6}\t        return self.{c.word()}.{c.word()}({c.word()})  # {c.prose(3, 8)}"
    if kind < 0.7:
        return (
            f'  File "/repo/src/{r.choice(PACKAGES)}/{c.word()}.py", line {n}, in {c.word()}\n'
            f"    {r.choice(EXCEPTIONS)}: {c.prose(4, 10)}"
        )
    if kind < 0.85:
        outcome = r.choice(("PASSED", "PASSED", "PASSED", "FAILED", "SKIPPED"))
        return f"tests/test_{c.word()}.py::test_{c.word()}_{c.word()} {outcome}"
    return f"# {c.prose(6, 16)}"


def _mcp_action(c: Corpus) -> str:
    r = c.r
    args = {c.word(): c.prose(1, 5), "limit": r.randint(1, 50)}
    return json.dumps({"name": f"{c.word()}.{r.choice(TOOLS)}", "arguments": args})


def _mcp_header(c: Corpus) -> str:
    return f'{{"jsonrpc": "2.0", "id": "{c.hexid()}", "result": {{"isError": false, "content": ['


def _mcp_line(c: Corpus) -> str:
    r = c.r
    return (
        json.dumps(
            {
                "type": "text",
                "id": r.randint(1, 99999),
                c.word(): c.prose(4, 14),
                "status": r.choice(("ok", "ok", "ok", "pending", "error")),
            }
        )
        + ","
    )


def _search_action(c: Corpus) -> str:
    r = c.r
    if r.random() < 0.7:
        return f'search(query="{c.prose(2, 5)}")'
    return f'open_url("https://{r.choice(SITES)}/{c.word()}/{c.word()}")'


def _search_header(c: Corpus) -> str:
    return f"Search results ({c.r.randint(3, 20)} of about {c.r.randint(100, 90000):,}):"


def _search_line(c: Corpus) -> str:
    r = c.r
    return (
        f"[{r.randint(1, 20)}] {c.prose(3, 8).title()} - {r.choice(SITES)}\n"
        f"URL: https://{r.choice(SITES)}/{c.word()}/{c.word()}-{c.word()}\n{c.prose(10, 24)}"
    )


def _web_action(c: Corpus) -> str:
    r = c.r
    return r.choice(
        (
            lambda: f"click [{r.randint(1, 400)}]",
            lambda: f'type [{r.randint(1, 400)}] "{c.prose(1, 4)}"',
            lambda: "scroll [down]",
            lambda: f"goto https://{r.choice(SITES)}/{c.word()}",
        )
    )()


def _web_header(c: Corpus) -> str:
    return f"<html><head><title>{c.prose(2, 6)}</title></head><body>"


def _web_line(c: Corpus) -> str:
    r = c.r
    kind = r.random()
    if kind < 0.5:
        return (
            f'<div class="{c.word()}-{c.word()}" id="{c.word()}{r.randint(1, 99)}">'
            f'<a href="/{c.word()}/{c.word()}">{c.prose(2, 8)}</a></div>'
        )
    if kind < 0.75:
        return f'[{r.randint(1, 400)}] {r.choice(("button", "link", "textbox"))} "{c.prose(1, 5)}"'
    return f"<p>{c.prose(8, 20)}</p>"


def _android_action(c: Corpus) -> str:
    r = c.r
    return r.choice(
        (
            lambda: f"tap({r.randint(0, 1080)}, {r.randint(0, 2400)})",
            lambda: f'input_text("{c.prose(1, 4)}")',
            lambda: "swipe(540, 1600, 540, 400)",
            lambda: f'launch_app("com.{r.choice(APPS)}.{c.word()}")',
            lambda: "press_back()",
        )
    )()


def _android_header(c: Corpus) -> str:
    return f'<hierarchy rotation="0" package="com.{c.r.choice(APPS)}.{c.word()}">'


def _android_line(c: Corpus) -> str:
    r = c.r
    x, y = r.randint(0, 900), r.randint(0, 2200)
    return (
        f'<node index="{r.randint(0, 30)}" text="{c.prose(0, 5)}" resource-id="com.'
        f'{r.choice(APPS)}:id/{c.word()}_{c.word()}" class="android.widget.{r.choice(WIDGETS)}" '
        f'bounds="[{x},{y}][{x + 180},{y + 96}]" clickable="{r.choice(("true", "false"))}"/>'
    )


def _os_action(c: Corpus) -> str:
    r = c.r
    return r.choice(
        (
            lambda: f"bash -c 'df -h {r.choice(DIRS)}'",
            lambda: f"ps aux | grep {r.choice(SERVICES)}",
            lambda: f"cat /proc/{r.randint(1, 40000)}/status",
            lambda: f'open_file("/home/dev/{c.word()}.{r.choice(EXTS)}")',
            lambda: f"sudo apt-get install -y {c.word()}",
        )
    )()


def _os_header(c: Corpus) -> str:
    return "USER       PID %CPU %MEM    VSZ   RSS TTY      STAT START   TIME COMMAND"


def _os_line(c: Corpus) -> str:
    r = c.r
    if r.random() < 0.5:
        return (
            f"dev     {r.randint(1, 40000):>5} {r.random() * 9:4.1f} {r.random() * 5:4.1f} "
            f"{r.randint(1000, 999999):>6} {r.randint(100, 99999):>5} ?  Ss   10:{r.randint(0, 59):02d}"
            f"   0:0{r.randint(0, 9)} /usr/bin/{c.word()} --{c.word()}={c.word()}"
        )
    return f"{c.word()}_{c.word()} = {c.prose(1, 6)}"


DOMAIN_TEXT: dict[str, tuple[Callable, Callable, Callable]] = {
    "terminal": (_terminal_action, _terminal_header, _terminal_line),
    "swe": (_swe_action, _swe_header, _swe_line),
    "mcp": (_mcp_action, _mcp_header, _mcp_line),
    "search": (_search_action, _search_header, _search_line),
    "web": (_web_action, _web_header, _web_line),
    "android": (_android_action, _android_header, _android_line),
    "os": (_os_action, _os_header, _os_line),
}


@dataclass
class FutureSpec:
    """A child branch of the recorded one: simulated steps fork_index.. (a SimulationJob)."""

    fork_index: int
    steps: list[tuple[str, str]]
    model: str
    perturbation: str = ""  # its label when the fork step's observation was perturbed


@dataclass
class TrajectorySpec:
    domain: str
    title: str
    task: str
    source_format: str
    steps: list[tuple[str, str]]
    futures: list[FutureSpec] = field(default_factory=list)

    @property
    def step_count(self) -> int:
        return len(self.steps) + sum(len(f.steps) for f in self.futures)


def trajectories(corpus: Corpus, total_steps: int) -> Iterator[TrajectorySpec]:
    """Trajectories until `total_steps` steps (the last one cut to fit)."""
    r = corpus.r
    made = 0
    while made < total_steps:
        domain = r.choice(DOMAIN_NAMES)
        episode = r.random() < 1 / 30
        n = min(r.randint(20, 50), total_steps - made)
        spec = TrajectorySpec(
            domain=domain,
            title=corpus.title(domain),
            task=corpus.task(),
            source_format="episode" if episode else r.choice(SOURCE_FORMATS),
            steps=[corpus.step(domain) for _ in range(n)],
        )
        kind = r.random()
        if not episode and n >= 4 and (kind < 0.25 or kind > 1 - 1 / 12):
            fork = r.randint(n // 2, n - 1)
            length = min(r.randint(1, 10), total_steps - made - n)
            if length > 0:
                spec.futures.append(
                    FutureSpec(
                        fork_index=fork,
                        # the replayed actions, new observations
                        steps=[
                            (spec.steps[min(fork + i, n - 1)][0], corpus.step(domain)[1])
                            for i in range(length)
                        ],
                        model=r.choice(MODELS),
                        perturbation=r.choice(PERTURBATIONS) if kind > 0.5 else "",
                    )
                )
        made += spec.step_count
        yield spec


def query_sets(corpus: Corpus, per_class: int) -> dict[str, list[str]]:
    """The queries of each class, the same for a seed: common words (in a tenth to a half of
    the steps), medium ones (made-up words of the Zipf vocabulary's ranks 1,500-20,000: in
    about 0.1-2% of the steps), rare ones (the corpus's rare tail: a dozen steps each at a
    million), phrases (of error messages, and of common words that seldom meet), then
    filtered and prefix queries."""
    rare = corpus.rare[:: max(1, len(corpus.rare) // 50)]
    made_up = corpus.vocab[len(set(COMMON)) :]
    medium = [made_up[rank] for rank in (1500, 2500, 4000, 6000, 9000, 13000, 16000, 20000)]
    sets = {
        "common": ["error", "file", "request", "data", "status", "error file", "user request",
                   "timeout", "connection", "value"],
        "medium": [*medium[:5], f"{medium[5]} error", *medium[6:]],
        "rare": [rare[0], rare[1], rare[2], f"{rare[3]} error", rare[4], f"{rare[5]} file",
                 rare[6], rare[7], rare[8], rare[9]],
        "phrase": ['"no such file or directory"', '"permission denied"', '"file error"',
                   '"segmentation fault"', '"the request"', '"internal server error"',
                   '"connection refused"', '"command not found"', '"rate limit exceeded"',
                   '"not found"'],
        "filtered": ["domain:terminal error", "source:simulated timeout", "action:grep",
                     "domain:swe \"no such file\"", "error -domain:web", "perturbation:* error"],
        "prefix": ["conn*", "perm*", "seg*", f"{rare[10][:5]}*"],
    }  # fmt: skip
    return {
        name: queries[:per_class] if name in ("common", "medium", "rare", "phrase") else queries
        for name, queries in sets.items()
    }


# ---- the orchestration (no Django here) --------------------------------------------------------


def pg_url(database: str) -> str:
    base = os.environ.get("BENCH_PG_URL") or os.environ.get("DATABASE_URL") or ""
    if not base.startswith(("postgres://", "postgresql://")):
        base = "postgres://postgres@127.0.0.1:5432/postgres"
    parts = urlsplit(base)
    return urlunsplit((parts.scheme, parts.netloc, "/" + database, parts.query, ""))


def pg_admin(sql: str) -> None:
    import psycopg

    with psycopg.connect(pg_url("postgres"), autocommit=True) as conn:
        conn.execute(sql)


def pg_exists(database: str) -> bool:
    import psycopg

    with psycopg.connect(pg_url("postgres"), autocommit=True) as conn:
        row = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [database]).fetchone()
    return row is not None


def run_child(phase: str, database_url: str, args: argparse.Namespace, out: Path) -> dict:
    env = {
        **os.environ,
        "DATABASE_URL": database_url,
        "DJANGO_SETTINGS_MODULE": "studio.settings",
    }
    # production settings: no query log; the benchmark makes no requests
    env.setdefault("DEBUG", "0")
    env.setdefault("SECRET_KEY", "bench-search-only")
    env.setdefault("ALLOWED_HOSTS", "127.0.0.1")
    command = [sys.executable, str(Path(__file__).resolve()), "--phase", phase, "--out", str(out)]
    command += args.forward
    done = subprocess.run(command, env=env, check=False)
    if done.returncode != 0:
        # the other parts still run and print; this one counts as a miss
        return {"verdicts": [(f"{phase}: the benchmark stopped (exit {done.returncode})", False)]}
    return json.loads(out.read_text()) if out.exists() else {}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1_000_000, help="PostgreSQL library size")
    parser.add_argument("--sqlite-steps", type=int, default=100_000)
    parser.add_argument("--only", choices=["pg", "sqlite"])
    parser.add_argument("--rebuild", action="store_true", help="build the libraries again")
    parser.add_argument("--queries", type=int, default=6, help="distinct queries a class (<=10)")
    parser.add_argument("--reps", type=int, default=5, help="timed runs of each query")
    parser.add_argument("--write-steps", type=int, default=50_000, help="steps imported")
    parser.add_argument("--write-reps", type=int, default=3)
    parser.add_argument(
        "--library-write-steps", type=int, default=20_000,
        help="steps imported into the big library (rolled back; 0: skip)",
    )  # fmt: skip
    parser.add_argument("--pg-db", default="bench_search")
    parser.add_argument("--sqlite-path", type=Path)
    parser.add_argument("--seed", type=int, default=27)
    parser.add_argument("--explain", action="store_true", help="EXPLAIN the slowest queries")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a goal is missed")
    parser.add_argument("--skip-write", action="store_true", help="query times and sizes only")
    parser.add_argument("--write-only", action="store_true", help="the write cost only")
    parser.add_argument("--phase", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args, _ = parser.parse_known_args()
    if args.phase:
        run_phase(args)
        return

    forward = sys.argv[1:]
    args.forward = forward
    sys.path.insert(0, str(ROOT))
    results: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        if args.only in (None, "pg"):
            if args.rebuild and pg_exists(args.pg_db):
                pg_admin(f'DROP DATABASE "{args.pg_db}" WITH (FORCE)')
            if not pg_exists(args.pg_db):
                pg_admin(f'CREATE DATABASE "{args.pg_db}"')
            results.append(run_child("pg", pg_url(args.pg_db), args, out / "pg.json"))
            if not args.skip_write:
                scratch = f"{args.pg_db}_write"
                if pg_exists(scratch):
                    pg_admin(f'DROP DATABASE "{scratch}" WITH (FORCE)')
                pg_admin(f'CREATE DATABASE "{scratch}"')
                try:
                    results.append(
                        run_child("pg-write", pg_url(scratch), args, out / "pg-write.json")
                    )
                finally:
                    pg_admin(f'DROP DATABASE IF EXISTS "{scratch}" WITH (FORCE)')
        if args.only in (None, "sqlite"):
            path = args.sqlite_path or ROOT / "var" / "bench-search.sqlite3"
            path.parent.mkdir(parents=True, exist_ok=True)
            if args.rebuild:
                for suffix in ("", "-wal", "-shm"):
                    Path(f"{path}{suffix}").unlink(missing_ok=True)
            results.append(run_child("sqlite", f"sqlite:///{path}", args, out / "sqlite.json"))
            if not args.skip_write:
                scratch_path = Path(tmp) / "bench-search-write.sqlite3"
                results.append(
                    run_child(
                        "sqlite-write", f"sqlite:///{scratch_path}", args, out / "sqlite-w.json"
                    )
                )
    failed = print_summary(results)
    if failed and args.strict:
        sys.exit(1)


def print_summary(results: list[dict]) -> list[str]:
    print("\n== summary ==")
    failed: list[str] = []
    for result in results:
        for line, ok in result.get("verdicts", []):
            print(f"{'PASS' if ok else 'FAIL'}  {line}")
            if not ok:
                failed.append(line)
    print(f"{len(failed)} goal(s) missed" if failed else "every goal met")
    return failed


# ---- inside a child process: Django set up on one database --------------------------------------


def run_phase(args: argparse.Namespace) -> None:
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    from studio.search import indexer

    indexer.SEND_ON_COMMIT = False  # no worker here: the benchmark runs the indexer itself
    result: dict = {"verdicts": []}
    if args.phase in ("pg", "sqlite"):
        library_phase(args, result)
    else:
        write_phase(args, result)
    if args.out:
        args.out.write_text(json.dumps(result))


def vendor() -> str:
    from django.db import connection

    return connection.vendor


def size_label(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if abs(n) < 1024 or unit == "GB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GB"  # pragma: no cover


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (nearest rank, as "95% of runs took at most this")."""
    ordered = sorted(values)
    rank = max(1, int(-(-q * len(ordered) // 100)))  # ceil
    return ordered[min(rank, len(ordered)) - 1]


# ---- building a library ---------------------------------------------------------------------------


def info_get() -> dict:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            f"CREATE TABLE IF NOT EXISTS {INFO_TABLE} (key text PRIMARY KEY, value text)"
        )
        cursor.execute(f"SELECT key, value FROM {INFO_TABLE}")
        return {k: json.loads(v) for k, v in cursor.fetchall()}


def info_set(**values) -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        for key, value in values.items():
            cursor.execute(f"DELETE FROM {INFO_TABLE} WHERE key = %s", [key])
            cursor.execute(
                f"INSERT INTO {INFO_TABLE} (key, value) VALUES (%s, %s)", [key, json.dumps(value)]
            )


def ensure_library(args: argparse.Namespace, steps: int) -> dict:
    """The library's info, built first when missing, incomplete or of another size."""
    info = info_get()
    wanted = {"steps": steps, "generator": GENERATOR}
    if info.get("complete") and all(info.get(k) == v for k, v in wanted.items()):
        print(
            f"reusing the library ({info['steps']:,} steps, seed {info['seed']}, built in "
            f"{info['build_s'] / 60:.1f} min); --rebuild builds it again"
        )
        return info
    if info.get("complete"):
        sys.exit(
            f"the database holds a library of {info.get('steps'):,} steps (generator "
            f"{info.get('generator')}), not {steps:,}: run with --rebuild"
        )
    from studio.models import Project

    Project.objects.filter(name__in=[PROJECT, OTHER_PROJECT]).delete()
    started = time.perf_counter()
    timings = build_library(args.seed, steps)
    build_s = time.perf_counter() - started
    info = {**wanted, "seed": args.seed, "build_s": build_s, "build": timings, "complete": True}
    info_set(**info)
    return info


class Writer:
    """Rows into a table: COPY on PostgreSQL, executemany on SQLite."""

    def __init__(self, table: str, columns: list[str]):
        self.table, self.columns = table, columns

    def write(self, rows: list[tuple]) -> None:
        from django.db import connection

        if not rows:
            return
        cols = ", ".join(connection.ops.quote_name(c) for c in self.columns)
        with connection.cursor() as cursor:
            if connection.vendor == "postgresql":
                with cursor.cursor.copy(f"COPY {self.table} ({cols}) FROM STDIN") as copy:
                    for row in rows:
                        copy.write_row(row)
            else:
                marks = ", ".join(["%s"] * len(self.columns))
                cursor.executemany(f"INSERT INTO {self.table} ({cols}) VALUES ({marks})", rows)


def step_columns() -> tuple[list[str], Callable[..., tuple]]:
    """studio_step's columns (but id) and a function making a row of them from what the
    benchmark sets; a column the benchmark does not know gets its field's default."""
    from django.db import connection

    from studio.models import Step

    known = (
        "branch_id index action observation provenance observation_source parse_status meta "
        "created_at"
    ).split()
    fields = [f for f in Step._meta.concrete_fields if not f.primary_key]
    columns = [f.column for f in fields]
    constant = {
        f.column: f.get_db_prep_save(f.get_default(), connection)
        for f in fields
        if f.column not in known
    }
    for column, value in constant.items():
        if value is None and column in ("timings",):
            constant[column] = "{}"
    if connection.vendor == "postgresql":
        # JSON as text, which COPY parses (a Jsonb wrapper needs binary COPY)
        constant = {k: (json.dumps(v.obj) if hasattr(v, "obj") else v) for k, v in constant.items()}
    order = [(known.index(c) if c in known else -1, constant.get(c)) for c in columns]

    def row(*values) -> tuple:
        return tuple(values[i] if i >= 0 else v for i, v in order)

    return columns, row


def search_index_ddl() -> list[tuple[str, str]]:
    """(name, CREATE statement) of the GIN indexes on studio_step (PostgreSQL)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'studio_step' "
            "AND indexdef ILIKE '%% USING gin %%'"
        )
        return list(cursor.fetchall())


def build_library(seed: int, steps: int) -> dict:
    from django.contrib.auth import get_user_model
    from django.db import connection, transaction

    from studio.models import Membership, Project

    pg = connection.vendor == "postgresql"
    user, _ = get_user_model().objects.get_or_create(username="bench-search")
    timings: dict[str, float] = {}
    started = time.perf_counter()
    dropped: list[tuple[str, str]] = []
    if pg:
        dropped = search_index_ddl()  # built once after the rows: far quicker than row by row
        with connection.cursor() as cursor:
            for name, _ddl in dropped:
                cursor.execute(f"DROP INDEX {name}")
    columns, make_row = step_columns()
    steps_out = Writer("studio_step", columns)
    corpus = Corpus(seed)
    text_bytes = written = 0
    last_report = time.perf_counter()
    for project_name, count in ((PROJECT, steps), (OTHER_PROJECT, max(1, steps // 100))):
        project = Project.objects.create(name=project_name)
        Membership.objects.create(project=project, user=user, role="admin")
        specs = trajectories(corpus, count)
        while True:
            chunk = [s for _, s in zip(range(300), specs, strict=False)]
            if not chunk:
                break
            with transaction.atomic():
                rows = _write_chunk(project, user, chunk, make_row)
                steps_out.write(rows)
            text_bytes += sum(len(r[columns.index("action")]) for r in rows)
            text_bytes += sum(len(r[columns.index("observation")]) for r in rows)
            written += len(rows)
            if time.perf_counter() - last_report > 30:
                last_report = time.perf_counter()
                rate = written / (last_report - started)
                print(f"  {written:,} steps written ({rate:,.0f}/s)", flush=True)
    timings["rows_s"] = time.perf_counter() - started
    print(
        f"  {written:,} steps ({text_bytes / written:,.0f} B of action and observation each on "
        f"average) in {timings['rows_s'] / 60:.1f} min",
        flush=True,
    )
    annotate(user)
    with connection.cursor() as cursor:
        if pg:
            started = time.perf_counter()
            cursor.execute("SET maintenance_work_mem = '1GB'")
            for name, ddl in dropped:
                cursor.execute(ddl)
                print(f"  built {name}", flush=True)
            timings["index_s"] = time.perf_counter() - started
            started = time.perf_counter()
            cursor.execute("VACUUM ANALYZE")
            timings["vacuum_s"] = time.perf_counter() - started
        else:
            started = time.perf_counter()
            cursor.execute("ANALYZE")
            timings["vacuum_s"] = time.perf_counter() - started
    timings["text_bytes_per_step"] = text_bytes / written
    return timings


def _write_chunk(project, user, chunk: list[TrajectorySpec], make_row) -> list[tuple]:
    from django.db.models import Value
    from django.db.models.functions import JSONArray

    from studio.models import Branch, SimulationJob, Trajectory

    made = Trajectory.objects.bulk_create(
        Trajectory(
            project=project,
            domain=spec.domain,
            title=spec.title,
            task_instruction=spec.task,
            source_format=spec.source_format,
            source_key=f"{project.pk}-{id(spec)}-{time.perf_counter_ns()}-{i}",
            step_count=len(spec.steps),
            metadata={"bench": "search"},
            created_by=user,
        )  # fmt: skip
        for i, spec in enumerate(chunk)
    )
    roots = Branch.objects.bulk_create(Branch(trajectory=t, name="recorded") for t in made)
    Branch.objects.filter(pk__in=[b.pk for b in roots]).update(
        lineage=JSONArray(JSONArray("pk", Value(0)))
    )
    forks = [
        (t, root, future)
        for t, root, spec in zip(made, roots, chunk, strict=True)
        for future in spec.futures
    ]
    jobs = SimulationJob.objects.bulk_create(
        SimulationJob(
            requester=user,
            trajectory=t,
            branch=root,
            fork_index=future.fork_index,
            backend="openai",
            model=future.model,
            status="succeeded",
            perturbations=[{"kind": future.perturbation, "name": future.perturbation}]
            if future.perturbation
            else [],
        )  # fmt: skip
        for t, root, future in forks
    )
    children = Branch.objects.bulk_create(
        Branch(
            trajectory=t,
            parent=root,
            fork_index=future.fork_index,
            name=f"future 1 · {future.model}",
            origin="simulated",
            status="succeeded",
            job=job,
            lineage=[[root.pk, 0], [0, future.fork_index]],
        )  # fmt: skip
        for (t, root, future), job in zip(forks, jobs, strict=True)
    )
    for child, (_t, root, future) in zip(children, forks, strict=True):
        child.lineage = [[root.pk, 0], [child.pk, future.fork_index]]
    Branch.objects.bulk_update(children, ["lineage"])
    now = "2025-06-01 12:00:00+00"
    rows = []
    for root, spec in zip(roots, chunk, strict=True):
        provenance = "agent" if spec.source_format == "episode" else "recorded"
        for i, (action, observation) in enumerate(spec.steps):
            rows.append(
                make_row(root.pk, i, action, observation, provenance, "recorded", "", "{}", now)
            )
    for child, job, (_t, _root, future) in zip(children, jobs, forks, strict=True):
        meta = {"job": job.pk, "backend": "openai", "model": future.model}
        for i, (action, observation) in enumerate(future.steps):
            source = "simulated"
            step_meta = meta
            if i == 0 and future.perturbation:
                source = "perturbed"
                step_meta = {
                    **meta,
                    "perturbation": {
                        "kind": future.perturbation, "label": future.perturbation,
                        "mode": "deterministic", "changed": True,
                    },
                }  # fmt: skip
            rows.append(
                make_row(
                    child.pk,
                    future.fork_index + i,
                    action,
                    observation,
                    "replayed",
                    source,
                    "well_formed",
                    json.dumps(step_meta),
                    now,
                )  # fmt: skip
            )
    return rows


def annotate(user) -> None:
    """An annotation on about one step in a hundred (verdicts in turn)."""
    from django.db import connection

    from studio.models import StepAnnotation

    fields = [f for f in StepAnnotation._meta.concrete_fields if not f.primary_key]
    values = {
        "step_id": "s.id",
        "author_id": str(int(user.pk)),
        "queue_id": "NULL",
        "verdict": "(CASE s.id % 3 WHEN 0 THEN 'accept' WHEN 1 THEN 'reject' ELSE 'needs_fix' END)",
        "comment": "'checked by the benchmark'",
        "created_at": "CURRENT_TIMESTAMP",
        "updated_at": "CURRENT_TIMESTAMP",
    }
    for f in fields:
        if f.column not in values:
            default = f.get_default()
            values[f.column] = (
                "'" + (json.dumps(default) if not isinstance(default, str) else default) + "'"
            )
    cols = ", ".join(f.column for f in fields)
    exprs = ", ".join(values[f.column] for f in fields)
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {StepAnnotation._meta.db_table} ({cols}) SELECT {exprs} "
            "FROM studio_step s WHERE s.id % 97 = 0"
        )


# ---- the library phase: build or reuse, time the queries, measure the index ----------------------


@dataclass
class Run:
    seconds: float
    parts: dict[str, float]  # page / count / other (seconds)
    total: int
    label: str


class SqlTimer:
    """Times each SQL statement `search_steps` runs (Django's execute wrapper)."""

    def __init__(self):
        self.calls: list[tuple[str, list, float]] = []

    def __call__(self, execute, sql, params, many, context):
        started = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            self.calls.append((sql, list(params or []), time.perf_counter() - started))

    def parts(self) -> dict[str, float]:
        """Seconds in the page's query (the first over the steps), the count, the matches
        of titles (a query over trajectories alone) and the rest."""
        out = {"page": 0.0, "count": 0.0, "titles": 0.0, "other": 0.0}
        page_seen = False
        for sql, _params, seconds in self.calls:
            steps = "studio_step s" in sql
            if "COUNT(" in sql.upper():
                out["count"] += seconds
            elif steps and not page_seen:
                out["page"] += seconds
                page_seen = True
            elif "studio_trajectory" in sql and not steps and "search" in sql.lower():
                out["titles"] += seconds
            else:
                out["other"] += seconds
        return out


def time_query(project_ids: list[int], query: str, sort: str) -> tuple[Run, SqlTimer]:
    from django.db import connection

    from studio.search.service import search_steps

    timer = SqlTimer()
    with connection.execute_wrapper(timer):
        started = time.perf_counter()
        results = search_steps(project_ids, query, page=1, per_page=PER_PAGE, sort=sort)
        seconds = time.perf_counter() - started
    return Run(seconds, timer.parts(), results.total, results.total_label), timer


def library_phase(args: argparse.Namespace, result: dict) -> None:
    from studio.models import Project

    pg = vendor() == "postgresql"
    steps = args.steps if pg else args.sqlite_steps
    name = "PostgreSQL" if pg else "SQLite"
    print(f"\n== {name}: a library of {steps:,} steps ==", flush=True)
    info = ensure_library(args, steps)
    if "build" in info:
        b = info["build"]
        parts = f"rows {b['rows_s'] / 60:.1f} min"
        if "index_s" in b:
            parts += f", index {b['index_s'] / 60:.1f} min"
        parts += f", vacuum/analyze {b['vacuum_s'] / 60:.1f} min"
        print(
            f"build time      {info['build_s'] / 60:.1f} min ({parts}); "
            f"{b['text_bytes_per_step']:,.0f} B of action+observation a step"
        )
    result["build_s"] = info.get("build_s")
    project = Project.objects.get(name=PROJECT)
    corpus = Corpus(info["seed"])
    sets = query_sets(corpus, min(args.queries, 10))
    if not args.write_only:
        measure_queries(args, result, [project.pk], sets, name)
        measure_size(result, name)
    if pg and not args.skip_write and args.library_write_steps > 0:
        library_write_cost(args, result, corpus)


def measure_queries(
    args: argparse.Namespace, result: dict, project_ids: list[int], sets: dict, name: str
) -> None:
    print(
        f"\nquery times: search_steps page 1 ({PER_PAGE} hits), {args.reps} warm runs of each "
        "query after a first (cold-ish) run; ms. page50, count50, title50, other50: medians of "
        "the page's query, the count's, the title matches' and the rest (the hits read, "
        "snippets)"
    )
    header = (
        f"{'class':<9}{'sort':<10}{'n':>3}{'p50':>8}{'p95':>8}{'max':>8}{'first':>8}"
        f"{'page50':>8}{'count50':>8}{'title50':>8}{'other50':>8}  hits (each query)"
    )
    print(header)
    # psycopg reads a statement's rows as it runs it; SQLite runs it while they are fetched,
    # outside the timed execute: no split there
    split = vendor() == "postgresql"
    slowest: dict[str, tuple[float, str, str, SqlTimer]] = {}
    table: dict = {}
    for cls, queries in sets.items():
        for sort in SORTS:
            warm: list[Run] = []
            first: list[Run] = []
            totals = []
            for query in queries:
                run, timer = time_query(project_ids, query, sort)
                first.append(run)
                totals.append(run.label)
                for _ in range(args.reps):
                    run, timer = time_query(project_ids, query, sort)
                    warm.append(run)
                    key = f"{cls}/{sort}"
                    if key not in slowest or run.seconds > slowest[key][0]:
                        slowest[key] = (run.seconds, query, sort, timer)
            secs = [r.seconds for r in warm]
            p50, p95 = statistics.median(secs), percentile(secs, 95)

            def part(name: str, runs: list[Run] = warm) -> str:
                if not split:
                    return f"{'-':>8}"
                return f"{statistics.median(r.parts[name] for r in runs) * 1000:>8.0f}"

            print(
                f"{cls:<9}{sort:<10}{len(queries):>3}{p50 * 1000:>8.0f}{p95 * 1000:>8.0f}"
                f"{max(secs) * 1000:>8.0f}{statistics.median(r.seconds for r in first) * 1000:>8.0f}"
                f"{part('page')}{part('count')}{part('titles')}{part('other')}  "
                + ", ".join(totals),
                flush=True,
            )
            table[f"{cls}/{sort}"] = {"p50": p50, "p95": p95, "max": max(secs)}
            ok = p50 < GOAL_P50_S and p95 < GOAL_P95_S
            result["verdicts"].append(
                (
                    f"{name} {cls:<8} {sort:<9} p50 {p50 * 1000:,.0f} ms (goal <300), "
                    f"p95 {p95 * 1000:,.0f} ms (goal <1000)",
                    ok,
                )
            )
    result["queries"] = table
    print("queries (and the steps of the whole library that hold them, counted apart):")
    for cls, queries in sets.items():
        shown = []
        for query in queries:
            n = exact_matches(query)
            shown.append(query if n is None else f"{query} ({n:,})")
        print(f"  {cls:<9}" + "  ".join(shown))
    worst = max(slowest.values(), key=lambda s: s[0])
    print(f"slowest warm run: {worst[0] * 1000:,.0f} ms for {worst[1]!r} sorted by {worst[2]}")
    if args.explain:
        explain(slowest)


def exact_matches(query: str) -> int | None:
    """The steps holding a query of words, phrases and prefixes (no fields or filters),
    counted with the index, untimed: what "common" and "rare" mean here. None for others,
    or when the search's internals (`studio.search.backends`) no longer offer the SQL."""
    from django.db import connection, transaction

    try:
        from studio.search.query import parse

        parsed = parse(query)
        if parsed.filters or parsed.regexes or any(t.negated or t.field for t in parsed.text):
            return None
        with transaction.atomic(), connection.cursor() as cursor:
            if connection.vendor == "postgresql":
                from studio.search.backends import pg_tsquery

                # the index, whatever the planner guesses (a scan would read every tsvector)
                cursor.execute("SET LOCAL enable_seqscan = off")
                cursor.execute("SET LOCAL enable_indexscan = off")
                cursor.execute(
                    "SELECT count(*) FROM studio_step WHERE search_vector @@ to_tsquery('simple', %s)",
                    [pg_tsquery(parsed.text)],
                )
            else:
                from studio.search.backends import FTS_TABLE, fts_match

                cursor.execute(
                    f"SELECT count(*) FROM {FTS_TABLE} WHERE {FTS_TABLE} MATCH %s",
                    [fts_match(parsed.text)],
                )
            return int(cursor.fetchone()[0])
    except Exception:  # noqa: BLE001 - a label only
        return None


def explain(slowest: dict) -> None:
    from django.db import connection

    print("\n== plans of each set's slowest query (its page and count statements) ==")
    for key, (seconds, query, sort, timer) in slowest.items():
        print(f"\n-- {key}: {query!r} sorted by {sort}, {seconds * 1000:,.0f} ms")
        for sql, params, took in timer.calls:
            if not ("search_vector" in sql or "_fts" in sql):
                continue
            print(f"-- statement {took * 1000:,.1f} ms: {sql[:300]}")
            with connection.cursor() as cursor:
                if connection.vendor == "postgresql":
                    cursor.execute("EXPLAIN (ANALYZE, BUFFERS) " + sql, params)
                else:
                    cursor.execute("EXPLAIN QUERY PLAN " + sql, params)
                for row in cursor.fetchall():
                    print("   ", " | ".join(str(x) for x in row))


def measure_size(result: dict, name: str) -> None:
    from django.db import connection

    print(f"\nindex size ({name})")
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                "SELECT pg_table_size('studio_step'), pg_indexes_size('studio_step'), "
                "pg_total_relation_size('studio_step'), pg_database_size(current_database()), "
                "(SELECT count(*) FROM studio_step)"
            )
            table, indexes, total, database, rows = cursor.fetchone()
            gin = 0
            for index_name, _ddl in search_index_ddl():
                cursor.execute("SELECT pg_relation_size(%s)", [index_name])
                size = cursor.fetchone()[0]
                gin += size
                print(
                    f"GIN index       {index_name}: {size_label(size)} ({size / rows:,.0f} B a step)"
                )
            cursor.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_name = "
                "'studio_step' AND data_type = 'tsvector'"
            )
            vectors = [r[0] for r in cursor.fetchall()]
            cols = {"action": "action", "observation": "observation"}
            cols.update({v: v for v in vectors})
            cursor.execute(
                "SELECT "
                + ", ".join(f"COALESCE(SUM(pg_column_size({c})), 0)" for c in cols.values())
                + ", SUM(pg_column_size(s.*)) FROM studio_step s"
            )
            sums = cursor.fetchone()
            stored = dict(zip(cols, sums[:-1], strict=True))
            whole_rows = sums[-1]
            for v in vectors:
                print(
                    f"tsvector column {v}: {size_label(stored[v])} stored "
                    f"({stored[v] / rows:,.0f} B a step, {stored[v] / whole_rows:.0%} of the "
                    f"rows' stored bytes; action+observation {size_label(stored['action'] + stored['observation'])})"
                )
            vector_bytes = sum(stored[v] for v in vectors)
            print(
                f"studio_step     {size_label(table)} table (with TOAST) + {size_label(indexes)} "
                f"indexes = {size_label(total)}; the search column and GIN index are about "
                f"{(vector_bytes + gin) / total:.0%} of it ({size_label(vector_bytes + gin)})"
            )
            print(
                f"database        {size_label(database)} on disk ({connection.settings_dict['NAME']})"
            )
            result["size"] = {"gin": gin, "vector": vector_bytes, "table": table, "total": total,
                              "database": database, "rows": rows}  # fmt: skip
        else:
            cursor.execute("PRAGMA page_size")
            page = cursor.fetchone()[0]
            cursor.execute("SELECT count(*) FROM studio_step")
            rows = cursor.fetchone()[0]
            sizes: dict[str, int] = {}
            try:
                cursor.execute("SELECT name, SUM(pgsize) FROM dbstat GROUP BY name")
                sizes = {n: s for n, s in cursor.fetchall()}
            except Exception:  # noqa: BLE001 - SQLite without the dbstat table
                pass
            cursor.execute("PRAGMA page_count")
            file_bytes = cursor.fetchone()[0] * page
            fts = sum(s for n, s in sizes.items() if n.startswith("studio_step_fts"))
            steps_table = sum(
                s
                for n, s in sizes.items()
                if n == "studio_step"
                or n.startswith("sqlite_autoindex_studio_step")
                or n.startswith("studio_step_")
                and not n.startswith("studio_step_fts")
            )
            print(
                f"FTS5 tables     {size_label(fts)} ({fts / rows:,.0f} B a step) next to "
                f"studio_step's {size_label(steps_table)} (with its indexes); the file is "
                f"{size_label(file_bytes)}"
            )
            result["size"] = {"fts": fts, "table": steps_table, "file": file_bytes, "rows": rows}


# ---- the write cost -----------------------------------------------------------------------------


def write_file(path: Path, seed: int, steps: int) -> int:
    """A native file of generated trajectories (recorded steps only): the import's input."""
    corpus = Corpus(seed)
    count = 0
    with path.open("w") as fh:
        fh.write('{"format": "agentworld-studio/v1", "trajectories": [\n')
        for i, spec in enumerate(trajectories(corpus, steps)):
            item = {
                "title": spec.title, "domain": spec.domain, "task_instruction": spec.task,
                "metadata": {"bench": "search-write", "n": i},
                "steps": [{"action": a, "observation": o} for a, o in spec.steps],
            }  # fmt: skip
            fh.write(("," if i else "") + json.dumps(item) + "\n")
            count += len(spec.steps)
        fh.write("]}\n")
    return count


@dataclass
class SearchObjects:
    """What the search adds to studio_step on PostgreSQL, as the migrations made it: its
    columns (type and generated expression), its indexes and triggers; dropped and made again
    to measure writes without them."""

    columns: list[tuple[str, str]]  # (name, "tsvector GENERATED ALWAYS AS (...) STORED")
    indexes: list[tuple[str, str]]
    triggers: list[tuple[str, str]]

    @classmethod
    def read(cls) -> SearchObjects:
        from django.db import connection

        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT a.attname, format_type(a.atttypid, a.atttypmod), a.attgenerated, "
                "pg_get_expr(d.adbin, d.adrelid) FROM pg_attribute a LEFT JOIN pg_attrdef d "
                "ON d.adrelid = a.attrelid AND d.adnum = a.attnum WHERE a.attrelid = "
                "'studio_step'::regclass AND a.attnum > 0 AND NOT a.attisdropped "
                "AND format_type(a.atttypid, a.atttypmod) = 'tsvector'"
            )
            columns = []
            for name, type_, generated, expr in cursor.fetchall():
                ddl = type_
                if generated == "s":
                    ddl += f" GENERATED ALWAYS AS ({expr}) STORED"
                elif expr:
                    ddl += f" DEFAULT {expr}"
                columns.append((name, ddl))
            names = [c for c, _ in columns]
            cursor.execute(
                "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'studio_step'"
            )
            indexes = [(n, d) for n, d in cursor.fetchall() if any(c in d for c in names)]
            cursor.execute(
                "SELECT tgname, pg_get_triggerdef(oid) FROM pg_trigger WHERE tgrelid = "
                "'studio_step'::regclass AND NOT tgisinternal"
            )
            triggers = list(cursor.fetchall())
        return cls(columns, indexes, triggers)

    def describe(self) -> str:
        parts = [f"column {n} {d[:60]}..." for n, d in self.columns]
        parts += [d for _, d in self.indexes]
        parts += [f"trigger {n}" for n, _ in self.triggers]
        return "; ".join(parts) or "(nothing)"

    def drop(self) -> None:
        from django.db import connection

        with connection.cursor() as cursor:
            for name, _ in self.triggers:
                cursor.execute(f"DROP TRIGGER {name} ON studio_step")
            for name, _ in self.indexes:
                cursor.execute(f"DROP INDEX {name}")
            for name, _ in self.columns:
                cursor.execute(f"ALTER TABLE studio_step DROP COLUMN {name}")

    def create(self) -> None:
        from django.db import connection

        with connection.cursor() as cursor:
            for name, ddl in self.columns:
                cursor.execute(f"ALTER TABLE studio_step ADD COLUMN {name} {ddl}")
            for _, ddl in self.indexes:
                cursor.execute(ddl)
            for _, ddl in self.triggers:
                cursor.execute(ddl)


@dataclass
class SqliteSearchObjects:
    """The FTS5 table and its triggers (sqlite_master's SQL), dropped and made again."""

    statements: list[tuple[str, str, str]]  # (type, name, sql)

    @classmethod
    def read(cls) -> SqliteSearchObjects:
        from django.db import connection

        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT type, name, sql FROM sqlite_master WHERE sql IS NOT NULL AND ("
                "(type = 'trigger' AND tbl_name = 'studio_step') OR (type = 'table' AND name "
                "LIKE 'studio_step_fts' AND sql LIKE 'CREATE VIRTUAL TABLE%%'))"
            )
            return cls(list(cursor.fetchall()))

    def describe(self) -> str:
        return "; ".join(f"{t} {n}" for t, n, _ in self.statements) or "(nothing)"

    def drop(self) -> None:
        from django.db import connection

        with connection.cursor() as cursor:
            for type_, name, _ in self.statements:
                if type_ == "trigger":
                    cursor.execute(f"DROP TRIGGER {name}")
            for type_, name, _ in self.statements:
                if type_ == "table":
                    cursor.execute(f"DROP TABLE {name}")

    def create(self) -> None:
        from django.db import connection

        with connection.cursor() as cursor:
            for type_, _, sql in self.statements:
                if type_ == "table":
                    cursor.execute(sql)
            for type_, _, sql in self.statements:
                if type_ == "trigger":
                    cursor.execute(sql)


def _empty_library() -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("TRUNCATE studio_trajectory, studio_branch, studio_step CASCADE")
            cursor.execute("CHECKPOINT")
        else:
            cursor.execute("DELETE FROM studio_step")
            cursor.execute("DELETE FROM studio_branch")
            cursor.execute("DELETE FROM studio_trajectory")


def _empty_steps(objects) -> None:
    """No steps (the trajectories and branches stay), the search index empty too."""
    from django.db import connection

    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("TRUNCATE studio_step CASCADE")
            cursor.execute("CHECKPOINT")
        else:
            if objects is not None:
                objects.drop()
            cursor.execute("DELETE FROM studio_step")
            if objects is not None:
                objects.create()


def _import(project, path: Path, defer: bool = True) -> tuple[float, int]:
    """The studio's import (its steps indexed after the commit, as the studio imports; or,
    `defer` False, indexed as they are written)."""
    from studio.services.imports import do_import_file

    started = time.perf_counter()
    done = do_import_file(project=project, path=path, defer_search_index=defer)
    return time.perf_counter() - started, done.steps_created


def _index() -> tuple[float, int]:
    """The indexer's run over what an import left unindexed (a worker's, after the commit)."""
    from studio.search.indexer import index_pending

    started = time.perf_counter()
    done = index_pending()
    return time.perf_counter() - started, done.steps


def _plain_rows(project, make_row, offset: int = 0) -> list[tuple]:
    """The imported steps again as rows of studio_step (indexes shifted by `offset`)."""
    from studio.models import Step

    return [
        make_row(b, i + offset, a, o, "recorded", "recorded", "", "{}", "2025-06-01 12:00:00+00")
        for b, i, a, o in Step.objects.filter(branch__trajectory__project=project)
        .order_by("id")
        .values_list("branch_id", "index", "action", "observation")
        .iterator(chunk_size=5000)
    ]


def _copy(rows: list[tuple], columns: list[str]) -> float:
    from django.db import transaction

    writer = Writer("studio_step", columns)
    started = time.perf_counter()
    with transaction.atomic():
        for start in range(0, len(rows), 1000):  # in batches, as an import writes them
            writer.write(rows[start : start + 1000])
    return time.perf_counter() - started


def write_phase(args: argparse.Namespace, result: dict) -> None:
    """Imports into an empty scratch library, alternately with and without the search
    column/index (PostgreSQL) or FTS table/triggers (SQLite)."""
    from django.db import connection

    from studio.models import Project

    pg = connection.vendor == "postgresql"
    name = "PostgreSQL" if pg else "SQLite"
    objects = SearchObjects.read() if pg else SqliteSearchObjects.read()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench-search-write.json"
        steps = write_file(path, args.seed + 1, args.write_steps)
        size_mb = path.stat().st_size / 1e6
        print(
            f"\n== {name}: write cost, {steps:,} steps ({size_mb:.0f} MB file) into an empty "
            f"library, {args.write_reps} runs each, alternately ==\nsearch objects: "
            f"{objects.describe()}",
            flush=True,
        )
        columns, make_row = step_columns()
        times = _write_times()
        present = True
        for rep in range(args.write_reps):
            order = STATES if rep % 2 == 0 else STATES[::-1]
            for state in order:
                _empty_library()
                if state != "without" and not present:
                    objects.create()
                    present = True
                elif state == "without" and present:
                    objects.drop()
                    present = False
                if pg:
                    with connection.cursor() as cursor:
                        cursor.execute("CHECKPOINT")
                project, _ = Project.objects.get_or_create(name="bench-search-write")
                seconds, created = _import(project, path, defer=state != "as written")
                assert created == steps, (created, steps)
                times[state]["import"].append(seconds)
                extra = ""
                if state == "with":
                    index_s, indexed = _index()
                    assert indexed == steps, (indexed, steps)
                    times[state]["index"].append(index_s)
                    extra = f", then indexed by the worker in {index_s:6.2f} s"
                if state != "as written":
                    rows = _plain_rows(project, make_row)
                    _empty_steps(objects if present else None)
                    times[state]["copy"].append(_copy(rows, columns))
                    extra += f"; plain COPY/INSERT {times[state]['copy'][-1]:6.2f} s"
                print(
                    f"  run {rep + 1} {state:<10} import {seconds:6.2f} s "
                    f"({steps / seconds:,.0f} steps/s){extra}",
                    flush=True,
                )
        if not present:
            objects.create()
    report_write(result, name, "empty library", steps, times)


# "with": the studio as it is (the import writes its steps unindexed, the worker indexes them
# after the commit); "as written": the search index kept current by every step's insert (how
# 0022 did it); "without": no search objects at all
STATES = ("with", "as written", "without")


def _write_times() -> dict[str, dict[str, list[float]]]:
    return {
        "with": {"import": [], "copy": [], "index": []},
        "as written": {"import": [], "copy": []},
        "without": {"import": [], "copy": []},
    }


def report_write(result: dict, name: str, where: str, steps: int, times: dict) -> None:
    med = {
        state: {kind: statistics.median(v) for kind, v in kinds.items() if v}
        for state, kinds in times.items()
    }
    base = med["without"]["import"]
    print(f"write cost ({name}, {where}, medians of {len(times['with']['import'])} runs)")

    def line(label: str, with_s: float, without_s: float) -> tuple[float, float]:
        ratio = with_s / without_s
        per_step_us = (with_s - without_s) / steps * 1e6
        print(
            f"  {label:<44} {with_s:6.2f} s against {without_s:6.2f} s: x{ratio:.2f} "
            f"({(ratio - 1):+.0%}), {per_step_us:+,.0f} µs a step"
        )
        return ratio, per_step_us

    ratio, per_step_us = line("import (what the user waits for)", med["with"]["import"], base)
    index_s = med["with"]["index"]
    print(
        f"  {'then the worker indexes it':<44} {index_s:6.2f} s ({index_s / steps * 1e6:,.0f} "
        f"µs a step, {steps / index_s:,.0f} steps/s): searchable "
        f"{med['with']['import'] + index_s:.2f} s after the import began"
    )
    written_ratio, written_us = line(
        "import indexed as written (not used)", med["as written"]["import"], base
    )
    copy_ratio, copy_us = line(
        "plain bulk write, indexed as written", med["with"]["copy"], med["without"]["copy"]
    )
    result.setdefault("write", {})[where] = {
        "import_with": med["with"]["import"], "import_without": base, "ratio": ratio,
        "per_step_us": per_step_us, "index_s": index_s, "index_us": index_s / steps * 1e6,
        "as_written_ratio": written_ratio, "as_written_us": written_us,
        "copy_ratio": copy_ratio, "copy_us": copy_us,
    }  # fmt: skip
    result["verdicts"].append(
        (
            f"{name} import into {where}: {(ratio - 1):+.0%} time with the search index "
            f"({per_step_us:+,.0f} µs a step; goal at most +20%); then indexed in "
            f"{index_s / steps * 1e6:,.0f} µs a step by a worker (indexed as written it was "
            f"{(written_ratio - 1):+.0%})",
            ratio <= GOAL_WRITE_RATIO,
        )
    )


def library_write_cost(args: argparse.Namespace, result: dict, corpus: Corpus) -> None:
    """The same import into the big library, in a transaction rolled back: with the index
    as it is, and with the search objects dropped inside the transaction."""
    from django.db import connection, transaction

    from studio.models import Project

    class Rollback(Exception):
        pass

    objects = SearchObjects.read()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench-search-write.json"
        steps = write_file(path, args.seed + 2, args.library_write_steps)
        print(
            f"\nwrite cost into this library: {steps:,} steps imported, then the same rows "
            f"with a plain COPY, in a transaction rolled back, {args.write_reps} runs each",
            flush=True,
        )
        columns, make_row = step_columns()
        times = _write_times()
        for rep in range(args.write_reps):
            order = STATES if rep % 2 == 0 else STATES[::-1]
            for state in order:
                with connection.cursor() as cursor:
                    cursor.execute("CHECKPOINT")
                extra = ""
                try:
                    with transaction.atomic():
                        if state == "without":
                            objects.drop()
                        project = Project.objects.create(name=f"bench-search-write-{rep}")
                        seconds, created = _import(project, path, defer=state != "as written")
                        assert created == steps
                        if state == "with":
                            # in the same transaction (rolled back): what the worker does
                            index_s, indexed = _index()
                            assert indexed == steps, (indexed, steps)
                            times[state]["index"].append(index_s)
                            extra = f", indexed by the worker in {index_s:6.2f} s"
                        if state != "as written":
                            rows = _plain_rows(project, make_row, offset=100_000)
                            copy_s = _copy(rows, columns)
                            times[state]["copy"].append(copy_s)
                            extra += f"; plain COPY {copy_s:6.2f} s"
                        raise Rollback
                except Rollback:
                    pass
                times[state]["import"].append(seconds)
                print(f"  run {rep + 1} {state:<10} import {seconds:6.2f} s{extra}", flush=True)
    started = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute("VACUUM studio_step")
    print(f"  (VACUUM of the rolled-back rows: {time.perf_counter() - started:.0f} s)")
    report_write(
        result,
        "PostgreSQL",
        f"the {result.get('size', {}).get('rows', 0):,}-step library",
        steps,
        times,
    )


if __name__ == "__main__":
    main()
