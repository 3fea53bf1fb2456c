#!/usr/bin/env bash
# Install and start AgentWorld Studio with demo data on embedded defaults:
# SQLite, a Celery worker (Redis if one answers, else kombu's filesystem transport), no GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
PORT=${PORT:-8000}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e .
export DEBUG=${DEBUG:-1}
.venv/bin/python manage.py migrate --noinput
.venv/bin/python manage.py load_demo
.venv/bin/python manage.py shell -c "from django.conf import settings; print('Broker:', settings.BROKER_DESCRIPTION)"
mkdir -p var
.venv/bin/celery -A studio worker -Q default,gpu -c 2 -l INFO >var/worker.log 2>&1 &
WORKER=$!
trap 'kill $WORKER 2>/dev/null || true' EXIT INT TERM
cat <<MSG

  AgentWorld Studio is starting at  http://127.0.0.1:${PORT}/
  Demo logins (password for all: demo-password):
    admin        project admin
    researcher   branches and simulates
    annotator    views and rates
  Worker log: var/worker.log     Stop with Ctrl-C.

MSG
.venv/bin/python manage.py runserver "127.0.0.1:${PORT}"
