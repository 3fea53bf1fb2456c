"""Project archives: a whole project as one file, to move it between installations (SQLite
demo to PostgreSQL production and back) or keep it as a backup. `python manage.py
project_archive export NAME --out FILE` and `project_archive import FILE`.

What goes in is found, not listed: every model of the studio app with a chain of foreign
keys up to Project (`schema`), in an order where what a row points to comes first, so a model
a later feature adds is archived with no change here. What is not plain data is declared
once: ids kept inside JSON or text (`embedded`), and paths of files the archive carries
(`files`). The file is gzip'd JSON lines (`codec`): a header (format version, studio version,
the studio app's applied migrations, each model's fields and row count), the users the rows
name, each model's rows (one JSON array a line, in the header's field order), the carried
files, and a last line that says the archive is complete.

Import (`reader`) writes in one transaction: new primary keys for every row (the target may
hold other projects), foreign keys and embedded ids remapped, and nothing written when
anything is wrong. Both directions stream: rows are read with `.iterator(chunk_size)` and
written with `bulk_create` in batches; what grows with the size of the project is the map of
old to new ids, 16 bytes a row (`pkmap`)."""
