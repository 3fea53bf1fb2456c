"""The login page of a locked-out sign-in (django-axes calls `lockout_response`, see
AXES_LOCKOUT_CALLABLE in the settings): the form again, with how long the lock-out lasts."""

from __future__ import annotations

import math
from datetime import datetime

from axes.helpers import get_client_ip_address, get_client_username, get_cool_off
from axes.models import AccessAttempt
from django.contrib.auth.forms import AuthenticationForm
from django.db.models import Max
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone

# Too Many Requests: the client may try again later (the page says when).
LOCKED_OUT_STATUS = 429


def lockout_response(
    request: HttpRequest, original_response=None, credentials=None
) -> HttpResponse:
    """The login page saying the account is locked out from this address, and until when."""
    # axes' async middleware passes the credentials second (django-axes 8.3): take them
    # from wherever they came
    given = next((c for c in (credentials, original_response) if isinstance(c, dict)), None)
    username = get_client_username(request, given or getattr(request, "axes_credentials", None))
    ip_address = getattr(request, "axes_ip_address", None) or get_client_ip_address(request)
    context = {
        "form": AuthenticationForm(request, initial={"username": username}),
        "next": request.POST.get("next", "") if request.method == "POST" else "",
        "locked_minutes": minutes_left(username, ip_address),
    }
    return render(request, "auth/login.html", context, status=LOCKED_OUT_STATUS)


def minutes_left(username: str | None, ip_address: str | None) -> int:
    """Whole minutes (rounded up) until the lock-out of `username` from `ip_address` ends:
    the cool-off counts from the last failure that was counted."""
    cool_off = get_cool_off()
    if cool_off is None:  # a lock-out without end (not this studio's settings)
        return 0
    last: datetime | None = AccessAttempt.objects.filter(
        username=username, ip_address=ip_address
    ).aggregate(last=Max("attempt_time"))["last"]
    if last is None:
        return max(1, math.ceil(cool_off.total_seconds() / 60))
    left = (last + cool_off - timezone.now()).total_seconds()
    return max(1, math.ceil(left / 60))
