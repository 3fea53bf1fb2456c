"""Endpoint prices (US dollars per million tokens in and out): typed on the Models page's
form, checked (a number, finite, 0 to 10,000), kept on edit, shown in the list ("no price
set" when blank, never a price of 0)."""

from __future__ import annotations

import pytest
from django.urls import reverse

from studio.models import ModelEndpoint
from tests.test_endpoints import add

pytestmark = pytest.mark.django_db


def test_an_admin_sets_prices_and_the_list_shows_them(client, project):
    client.force_login(project.users["admin"])
    r = add(client, project, price_in_per_mtok="0.15", price_out_per_mtok="3")
    assert r.status_code == 302
    endpoint = ModelEndpoint.objects.get(name="served")
    assert (endpoint.price_in_per_mtok, endpoint.price_out_per_mtok) == (0.15, 3.0)
    listing = client.get(reverse("endpoint_list", args=[project.pk])).content.decode()
    row = listing[listing.index(f'id="endpoint-{endpoint.pk}"') :]
    row = row[: row.index("</tr>")]
    assert "$0.15 / $3 per 1M tokens in/out" in row  # as typed, not "3.0"
    # the baseline has none: said so, not shown as free
    baseline = project.endpoints.get(kind="retrieval")
    other = listing[listing.index(f'id="endpoint-{baseline.pk}"') :]
    assert "no price set" in other[: other.index("</tr>")]
    # the edit form shows them, and saving without touching them keeps them
    form = client.get(reverse("endpoint_edit", args=[endpoint.pk])).content.decode()
    assert 'name="price_in_per_mtok" value="0.15"' in form
    r = client.post(
        reverse("endpoint_edit", args=[endpoint.pk]),
        {"name": "served", "role": "world", "kind": "openai", "base_url": endpoint.base_url,
         "model": "world-model", "supports_n": "on", "price_in_per_mtok": "0.15",
         "price_out_per_mtok": ""},
    )  # fmt: skip
    assert r.status_code == 302
    endpoint.refresh_from_db()
    assert (endpoint.price_in_per_mtok, endpoint.price_out_per_mtok) == (0.15, None)
    listing = client.get(reverse("endpoint_list", args=[project.pk])).content.decode()
    assert "$0.15 / no price per 1M tokens in/out" in listing


@pytest.mark.parametrize(
    "field,value,message",
    [
        ("price_in_per_mtok", "-1", "Price of input tokens (USD per 1M): a price is from 0 to"),
        ("price_out_per_mtok", "20000", "Price of output tokens (USD per 1M): a price is from 0"),
        ("price_in_per_mtok", "nan", "Enter a number."),
        ("price_out_per_mtok", "inf", "Enter a number."),
        ("price_in_per_mtok", "cheap", "Enter a number."),
    ],
)
def test_a_price_that_is_not_a_sane_number_is_refused_naming_the_field(
    client, project, field, value, message
):
    client.force_login(project.users["admin"])
    r = add(client, project, **{field: value})
    assert r.status_code == 400  # the form again, with its errors
    errors = r.context["form"].errors
    assert list(errors) == [field] and message in errors[field][0], errors
    assert not ModelEndpoint.objects.filter(name="served").exists()
