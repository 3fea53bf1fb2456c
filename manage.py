#!/usr/bin/env python
import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "studio.settings")
    from django.core.management import execute_from_command_line

    from studio.env import config_errors_exit

    with config_errors_exit():
        execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
