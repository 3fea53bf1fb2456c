"""Step search at a million steps (scripts/bench_search.py): an index of the steps whose
observation was not recorded (simulated, perturbed, none: a small share of a library), by
(observation_source, id), on PostgreSQL. `source:simulated`, `perturbation:` and `model:`
filters then read those rows, newest first, instead of testing the tsvector of every step
that holds the query's words (PostgreSQL tests the text match first whatever the order of
the conditions, and a tsvector is kilobytes read out of line). Imports write recorded steps:
nothing to add to this index. Nothing on SQLite (FTS5 answers these queries in milliseconds
at 100,000 steps)."""

from django.db import migrations

PG_CREATE = [
    "CREATE INDEX studio_step_not_recorded ON studio_step (observation_source, id) "
    "WHERE observation_source <> 'recorded'",
]
PG_DROP = ["DROP INDEX IF EXISTS studio_step_not_recorded"]


def _run(statements_by_vendor):
    def run(apps, schema_editor):
        for sql in statements_by_vendor.get(schema_editor.connection.vendor, ()):
            schema_editor.execute(sql, params=None)

    return run


class Migration(migrations.Migration):
    dependencies = [("studio", "0024_behaviour_search")]

    operations = [
        migrations.RunPython(_run({"postgresql": PG_CREATE}), _run({"postgresql": PG_DROP}))
    ]
