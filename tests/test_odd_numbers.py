"""Numbers in query parameters that are not plain ASCII digits ("²" passes str.isdigit() but
not int()) or too long for an integer column are read as no number: the page answers as for
any wrong value (404 or its default), never with a server error."""

from __future__ import annotations

import pytest
from django.urls import reverse

from studio.http import whole_number
from studio.models import Dataset, DatasetVersion
from tests.support.branching import make_trajectory

ODD = ("²", "١٢", "9" * 30, "-1", "1.0", " 1")


def test_whole_number_takes_ascii_digits_only():
    assert whole_number("42") == 42 and whole_number(7) == 7
    for value in (*ODD, "", None, "4 2", "0x10"):
        assert whole_number(value) is None, value


@pytest.mark.parametrize("odd", ODD)
def test_odd_numbers_in_urls_are_no_server_error(researcher_client, project, odd):
    _, root = make_trajectory(project)
    step = root.steps.first()
    dataset = Dataset.objects.create(project=project, name="d")
    DatasetVersion.objects.create(dataset=dataset, number=1, source="x")
    pages = {
        reverse("dataset_detail", args=[dataset.pk]) + "?version=": (200,),
        reverse("playground", args=[root.pk]) + "?at=": (404,),
        reverse("playground", args=[root.pk]) + "?job=": (200,),
        reverse("branch_fork", args=[root.pk, 1]) + "?world=": (200,),
        reverse("step_annotate", args=[step.pk]) + "?branch=": (200,),
        reverse("step_annotate", args=[step.pk]) + "?queue=": (200,),
    }
    for url, statuses in pages.items():
        response = researcher_client.get(url + odd)
        assert response.status_code in statuses, (url + odd, response.status_code)
