"""How much a person may upload: files of at most STUDIO_MAX_UPLOAD_MB, and at most
STUDIO_MAX_UPLOADS_PER_HOUR uploads an hour (over every project). Counted from the import
jobs' own rows (a job is an upload): the count is the same in every web process, and no
cache or new table is needed. Each refusal says which limit, and its setting."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.template.defaultfilters import filesizeformat
from django.utils import timezone

from studio.models import ImportJob

RATE_WINDOW = timedelta(hours=1)


@dataclass(frozen=True)
class UploadRefusal:
    """Why an upload is refused, and the HTTP status that says it."""

    message: str
    status: int  # 413 Content Too Large, 429 Too Many Requests


def size_refusal(name: str, size: int | None = None) -> UploadRefusal:
    """`name` is over the size limit: `size` bytes, or (None) more than the limit, as far as
    it was read before it was refused."""
    limit = filesizeformat(settings.STUDIO_MAX_UPLOAD_BYTES)
    shown = (
        f"is {filesizeformat(size)}: the upload limit is {limit}"
        if size is not None
        else f"is larger than the upload limit of {limit}"
    )
    return UploadRefusal(
        f"{name or 'The file'} {shown} a file (STUDIO_MAX_UPLOAD_MB); nothing of it was stored.",
        413,
    )


def rate_refusal(user) -> UploadRefusal | None:
    """None while `user` may upload again; else how many uploads the last hour held and
    when the next one is allowed."""
    limit = settings.STUDIO_MAX_UPLOADS_PER_HOUR
    since = timezone.now() - RATE_WINDOW
    recent = ImportJob.objects.filter(requester_id=user.pk, created_at__gte=since)
    count = recent.count()
    if count < limit:
        return None
    # one more is allowed once count - limit + 1 uploads have left the window: the oldest
    # first (more than one when the limit was lowered meanwhile)
    leaving = recent.order_by("created_at").values_list("created_at", flat=True)[count - limit]
    minutes = max(1, math.ceil((leaving + RATE_WINDOW - timezone.now()).total_seconds() / 60))
    return UploadRefusal(
        f"You uploaded {count} file{'s' if count != 1 else ''} in the last hour: the limit is "
        f"{limit} an hour (STUDIO_MAX_UPLOADS_PER_HOUR). Try again in {minutes} "
        f"minute{'s' if minutes != 1 else ''}.",
        429,
    )
