"""One open step per episode (a constraint instead of a lock per step), and the first branch of
a trajectory started in a world, or played as an episode, called simulated: its observations
were never recorded; they are the world model's."""

from django.db import migrations, models


def simulated_roots(apps, schema_editor):
    Branch = apps.get_model("studio", "Branch")
    Branch.objects.filter(
        parent__isnull=True,
        origin="recorded",
        trajectory__source_format__in=["world", "episode"],
    ).update(origin="simulated")


def recorded_roots(apps, schema_editor):
    Branch = apps.get_model("studio", "Branch")
    Branch.objects.filter(
        parent__isnull=True,
        origin="simulated",
        trajectory__source_format__in=["world", "episode"],
    ).update(origin="recorded")


class Migration(migrations.Migration):
    dependencies = [
        ("studio", "0007_api_tokens_and_appending_jobs"),
    ]

    operations = [
        migrations.AddConstraint(
            model_name="simulationjob",
            constraint=models.UniqueConstraint(
                condition=models.Q(("appends", True), ("status__in", ["queued", "running"])),
                fields=("branch",),
                name="one_open_step_per_episode",
            ),
        ),
        migrations.RunPython(simulated_roots, recorded_roots),
    ]
