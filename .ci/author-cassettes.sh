#!/bin/sh
# Re-author every E2B and Vercel cassette through the stand-ins (fake_e2b.py, simulator.py), one step after
# another, printing each step's time. Run from the repository root in an environment with core, the driver kit,
# conformance, mainsdk-e2b and mainsdk-vercel[sdk-check] installed:  sh .ci/author-cassettes.sh
# The e2b suite is recorded with a fresh /tmp (its secrets test must not find other checkouts' made-up secret
# there; the stand-in's commands see the host's /tmp), hence unshare when run as root.
# FROM_STEP=N skips the steps before the Nth (1: the e2b suite, 2: its finish).
set -eu
PY=${PYTHON:-python}
# A step whose own tests fail goes on: record mode saves only the tests that passed (the e2b network tests cannot
# pass against a stand-in with no firewall; finish.py derives their cassettes), so read each step's summary.
step() {
    started=$(date +%s)
    echo "== $*"
    status=0
    "$@" || status=$?
    echo "== $(( $(date +%s) - started ))s, exit $status: $*"
}
fresh_tmp() {
    if [ "$(id -u)" = 0 ] && command -v unshare >/dev/null; then
        unshare -m sh -c 'mount -t tmpfs none /tmp && exec "$@"' sh "$@"
    else
        "$@"
    fi
}
all_started=$(date +%s)
[ "${FROM_STEP:-1}" -gt 1 ] || step fresh_tmp "$PY" mainsdk_e2b/tests/authoring/author.py
[ "${FROM_STEP:-1}" -gt 2 ] || step "$PY" mainsdk_e2b/tests/authoring/finish.py
step "$PY" mainsdk_e2b/tests/authoring/egress.py
step "$PY" mainsdk_e2b/tests/authoring/packages.py
step "$PY" mainsdk_vercel/tests/conformance/author.py
step "$PY" mainsdk_vercel/tests/conformance/author.py --packages
step "$PY" mainsdk_vercel/tests/test_egress.py --author
echo "== all: $(( $(date +%s) - all_started ))s"
du -sb mainsdk_e2b/tests mainsdk_vercel/tests
