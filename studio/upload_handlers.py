"""An upload handler that refuses a file while the request body streams in: Django's own
handlers would first write the whole file to memory or a temporary file, and the form would
only then see its size. A body longer than the limit is refused before a byte of its file is
read; a file found too large as it is read is dropped at the limit (its temporary file too).
Under uvicorn such a body never gets here: `studio.body_limits` answers it 413 before Django
buffers it (with the same allowance, FORM_ALLOWANCE_BYTES); this handler still names the
file, refuses by the rate limit, and bounds a body that reaches Django another way (WSGI,
the test client). A file it lets through lands in FILE_UPLOAD_TEMP_DIR, beside MEDIA_ROOT,
and is moved from there to its place (`studio.services.import_jobs.store_upload`).

Put first in `request.upload_handlers` (before the body is read: the view is csrf_exempt and
checks CSRF itself once the handler is in place, as Django's documentation shows). A refused
file is dropped from `request.FILES`, the rest of the body is read and discarded (so the
browser gets the answer, not a reset connection), and `request.upload_refusal` says why."""

from __future__ import annotations

from django.conf import settings
from django.core.files.uploadhandler import FileUploadHandler, StopUpload

from studio.services.upload_limits import UploadRefusal, size_refusal

# The form's other fields and the multipart boundaries, on top of the file itself.
FORM_ALLOWANCE_BYTES = 64 * 1024


class LimitedUploadHandler(FileUploadHandler):
    def __init__(self, request=None, refusal: UploadRefusal | None = None):
        """`refusal`: refuse any file, for this reason (a rate limit reached)."""
        super().__init__(request)
        self.refusal = refusal
        self.limit = settings.STUDIO_MAX_UPLOAD_BYTES
        self.body_length = 0

    def handle_raw_input(self, input_data, META, content_length, boundary, encoding=None):
        self.body_length = content_length or 0
        return None  # the parsing itself is Django's

    def new_file(self, field_name, file_name, *args, **kwargs) -> None:
        super().new_file(field_name, file_name, *args, **kwargs)
        if self.refusal is None and self.body_length > self.limit + FORM_ALLOWANCE_BYTES:
            # the body says up front that the file cannot fit: read none of it
            self.refusal = size_refusal(file_name)
        if self.refusal is not None:
            self._refuse(self.refusal)

    def receive_data_chunk(self, raw_data: bytes, start: int) -> bytes:
        if start + len(raw_data) > self.limit:
            self._refuse(size_refusal(self.file_name or ""))
        return raw_data

    def file_complete(self, file_size: int) -> None:
        return None  # the next handler (memory or temporary file) makes the file

    def _refuse(self, refusal: UploadRefusal) -> None:
        self.request.upload_refusal = refusal  # type: ignore[union-attr]
        # connection_reset=False: the parser reads the rest of the body and drops it
        raise StopUpload(connection_reset=False)
