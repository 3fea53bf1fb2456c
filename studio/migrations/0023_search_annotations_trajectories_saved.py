"""Full-text search of annotations (comment, tags, correction) and of trajectories (title,
task, world name), as 0022 did for steps: on PostgreSQL a stored generated tsvector column
with a GIN index on each table, on SQLite an FTS5 table of its own kept current by triggers
(these tables are small next to the steps, so they keep their own copy of the text). And
saved searches."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

INDEXED_CHARS = 20_000  # studio.search.backends.INDEXED_CHARS
ANNOTATION_FTS = "studio_annotation_fts"
TRAJECTORY_FTS = "studio_trajectory_fts"

# The DDL, frozen here (tests/test_search_sqlite_fts.py runs the SQLite statements on a bare
# connection).


def _pg_text(expression: str) -> str:
    return (
        f"regexp_replace(left(COALESCE({expression}, ''), {INDEXED_CHARS}), "
        "'[^[:alnum:]]+', ' ', 'g')"
    )


def _pg_vector(parts: list[tuple[str, str]]) -> str:
    return " || ".join(
        f"setweight(to_tsvector('simple'::regconfig, {_pg_text(expr)}), '{weight}')"
        for expr, weight in parts
    )


PG_CREATE = [
    "ALTER TABLE studio_stepannotation ADD COLUMN search_vector tsvector GENERATED ALWAYS AS ("
    + _pg_vector([("comment", "A"), ("tags::text", "B"), ("corrected_observation", "C")])
    + ") STORED",
    "CREATE INDEX studio_stepannotation_search_gin ON studio_stepannotation "
    "USING GIN (search_vector)",
    "ALTER TABLE studio_trajectory ADD COLUMN search_vector tsvector GENERATED ALWAYS AS ("
    + _pg_vector([("title", "A"), ("task_instruction", "B"), ("metadata->'world'->>'name'", "C")])
    + ") STORED",
    "CREATE INDEX studio_trajectory_search_gin ON studio_trajectory USING GIN (search_vector)",
]
PG_DROP = [
    "DROP INDEX IF EXISTS studio_trajectory_search_gin",
    "ALTER TABLE studio_trajectory DROP COLUMN IF EXISTS search_vector",
    "DROP INDEX IF EXISTS studio_stepannotation_search_gin",
    "ALTER TABLE studio_stepannotation DROP COLUMN IF EXISTS search_vector",
]


def _sqlite_table(table: str, fts: str, columns: list[tuple[str, str]], watched: str) -> list[str]:
    """An FTS5 table `fts` with `columns` (name, SQL over a row `%s` of `table`), filled now
    and kept current by triggers (`watched`: the columns an update must look at)."""
    names = ", ".join(name for name, _ in columns)

    def values(row: str) -> str:
        return ", ".join(sql % row for _, sql in columns)

    return [
        f"CREATE VIRTUAL TABLE {fts} USING fts5({names})",
        f"INSERT INTO {fts}(rowid, {names}) SELECT id, {values(table)} FROM {table}",
        f"CREATE TRIGGER {fts}_insert AFTER INSERT ON {table} BEGIN "
        f"INSERT INTO {fts}(rowid, {names}) VALUES (new.id, {values('new')}); END",
        f"CREATE TRIGGER {fts}_delete AFTER DELETE ON {table} BEGIN "
        f"DELETE FROM {fts} WHERE rowid = old.id; END",
        f"CREATE TRIGGER {fts}_update AFTER UPDATE OF {watched} ON {table} BEGIN "
        f"DELETE FROM {fts} WHERE rowid = old.id; "
        f"INSERT INTO {fts}(rowid, {names}) VALUES (new.id, {values('new')}); END",
    ]


SQLITE_CREATE = [
    *_sqlite_table(
        "studio_stepannotation",
        ANNOTATION_FTS,
        [
            ("comment", f"substr(%s.comment, 1, {INDEXED_CHARS})"),
            ("tag", "%s.tags"),
            ("correction", f"substr(%s.corrected_observation, 1, {INDEXED_CHARS})"),
        ],
        "comment, tags, corrected_observation",
    ),
    *_sqlite_table(
        "studio_trajectory",
        TRAJECTORY_FTS,
        [
            ("title", "%s.title"),
            ("task", f"substr(%s.task_instruction, 1, {INDEXED_CHARS})"),
            ("world", "COALESCE(json_extract(%s.metadata, '$.world.name'), '')"),
        ],
        "title, task_instruction, metadata",
    ),
]
SQLITE_DROP = [
    f"DROP TRIGGER IF EXISTS {fts}_{event}"
    for fts in (ANNOTATION_FTS, TRAJECTORY_FTS)
    for event in ("update", "delete", "insert")
] + [f"DROP TABLE IF EXISTS {fts}" for fts in (ANNOTATION_FTS, TRAJECTORY_FTS)]


def _run(statements_by_vendor):
    def run(apps, schema_editor):
        statements = statements_by_vendor.get(schema_editor.connection.vendor, ())
        for sql in statements:
            schema_editor.execute(sql, params=None)

    return run


class Migration(migrations.Migration):
    dependencies = [
        ("studio", "0022_step_search"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="SavedSearch",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("name", models.CharField(max_length=200)),
                ("query", models.CharField(max_length=2000)),
                ("sort", models.CharField(default="relevance", max_length=20)),
                ("shared", models.BooleanField(default=False)),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                ("updated_at", models.DateTimeField(auto_now=True)),
                (
                    "owner",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="saved_searches",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
                (
                    "project",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="saved_searches",
                        to="studio.project",
                    ),
                ),
            ],
            options={
                "ordering": ["name", "id"],
                "constraints": [
                    models.UniqueConstraint(
                        fields=("project", "owner", "name"), name="unique_saved_search_name"
                    )
                ],
            },
        ),
        migrations.RunPython(
            _run({"postgresql": PG_CREATE, "sqlite": SQLITE_CREATE}),
            _run({"postgresql": PG_DROP, "sqlite": SQLITE_DROP}),
        ),
    ]
