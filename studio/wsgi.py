import os

from django.core.wsgi import get_wsgi_application

from studio.env import config_errors_exit

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "studio.settings")
with config_errors_exit():  # a missing variable: one line naming it, exit status 1
    application = get_wsgi_application()
