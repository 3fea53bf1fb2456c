"""The login lock-out in a real browser: five wrong passwords in the login form lock the
account out from this address, the right password is then refused with the message on the
page, and once an admin unlocks it (`manage.py axes_reset_username`) it signs in."""

from __future__ import annotations

import re

import pytest
from django.core.management import call_command
from playwright.sync_api import expect

from tests.support.browser import shot

pytestmark = pytest.mark.browser

PASSWORD = "pw-for-tests-1"
MESSAGE = (
    "Too many failed sign-ins for this account from this address; try again in 15 minutes or "
    "ask an admin to unlock it."
)


def submit(page, base: str, username: str, password: str) -> int:
    """The login form, filled in and sent as a person does; the status of its answer."""
    page.goto(f"{base}/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", password)
    with page.expect_navigation() as sent:
        page.click("button[type=submit]")
    return sent.value.status


def test_five_wrong_passwords_lock_the_form_out_until_an_admin_unlocks(
    transactional_db, project, page, live_server
):
    base = live_server.url
    statuses = [submit(page, base, "researcher", f"wrong-{i}") for i in range(5)]
    assert statuses == [200, 200, 200, 200, 429]
    expect(page.locator("[data-lockout]")).to_have_text(MESSAGE)

    # the right password is refused while the lock-out lasts, with the same message
    assert submit(page, base, "researcher", PASSWORD) == 429
    expect(page.locator("[data-lockout]")).to_have_text(MESSAGE)
    expect(page.locator("input[name=username]")).to_have_value("researcher")
    assert page.url == f"{base}/login/"
    shot(page, "login-locked-out")
    page.goto(f"{base}/")
    page.wait_for_url(re.compile(r"/login/"))  # not signed in

    call_command("axes_reset_username", "researcher")
    submit(page, base, "researcher", PASSWORD)
    page.wait_for_url(f"{base}/")
    expect(page.get_by_role("link", name="Test project", exact=True)).to_be_visible()
