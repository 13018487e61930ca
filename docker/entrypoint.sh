#!/bin/sh
# Container roles: web | proxy | dispatcher | master | worker (configuration comes from the
# environment).
set -eu
home=${STACKBENCH_HOME:-/var/lib/stackbench}
case "${1:-}" in
  web)
    stackbench migrate
    exec stackbench web --host 0.0.0.0 --port 8000 --workers "${STACKBENCH_WEB_WORKERS:-4}"
    ;;
  proxy)
    # nginx in front of the web container: it reads every request whole before gunicorn does
    exec stackbench proxy --listen 0.0.0.0:8000 --upstream web:8000
    ;;
  dispatcher)
    # takes every submitted series to done or failed through the master's REST API
    stackbench migrate
    exec stackbench dispatcher
    ;;
  master)
    base="$home/buildbot/master"
    if [ ! -f "$base/buildbot.tac" ]; then
      cfg=$(python3 -c 'import os, stackbench.jobs.executors as j; print(os.path.join(os.path.dirname(j.__file__), "master.cfg"))')
      buildbot create-master --relocatable --quiet --config="$cfg" "$base"
    fi
    cd "$base"
    exec buildbot start --nodaemon "$base"
    ;;
  worker)
    base="$home/buildbot/worker-$STACKBENCH_WORKER_NAME"
    if [ ! -f "$base/buildbot.tac" ]; then
      buildbot-worker create-worker --relocatable --umask=0o077 "$base" \
        "$STACKBENCH_MASTER" "$STACKBENCH_WORKER_NAME" "$STACKBENCH_BB_WORKER_PASSWORD"
    fi
    exec buildbot-worker start --nodaemon "$base"
    ;;
  *)
    exec "$@"
    ;;
esac
