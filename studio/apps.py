from django.apps import AppConfig


class StudioConfig(AppConfig):
    name = "studio"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from studio.secrets import connect_signals

        connect_signals()  # a changed key setting (tests) drops the cached cipher

        from django.db.backends.signals import connection_created

        from studio.search.text import on_connection_created

        # SQLite's search triggers call a Python function: every connection has it
        connection_created.connect(on_connection_created, dispatch_uid="studio-sqlite-fts")
