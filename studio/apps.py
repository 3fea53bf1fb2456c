from django.apps import AppConfig


class StudioConfig(AppConfig):
    name = "studio"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from studio.secrets import connect_signals

        connect_signals()  # a changed key setting (tests) drops the cached cipher
