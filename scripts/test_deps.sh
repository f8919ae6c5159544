#!/usr/bin/env bash
# The system packages the test suite uses, from Debian's archive (`make test` and .ci/run call this):
#   chromium        the page's browser tests (playwright drives it; its own browser download is not used)
#   redis-server    the Redis job-queue tests (each starts its own server on a free loopback port)
#   docker-compose  validates docker-compose.yml (no engine needed)
# Installs what is missing when run as root; then prints one line naming what is still missing (the tests
# that need it skip with that reason, or fail under CI=true) and exits 0, so the suite still runs.
set -u
declare -A package=([chromium]=chromium [redis-server]=redis-server [docker-compose]=docker-compose)
missing=()
for cmd in chromium redis-server docker-compose; do
    command -v "$cmd" >/dev/null 2>&1 || missing+=("${package[$cmd]}")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"; } >/dev/null 2>&1
    still=()
    for cmd in chromium redis-server docker-compose; do
        command -v "$cmd" >/dev/null 2>&1 || still+=("${package[$cmd]}")
    done
    [ ${#still[@]} -eq 0 ] && exit 0
    echo "test-deps: could not install ${still[*]} (apt-get failed): the tests that need them skip"
else
    echo "test-deps: ${missing[*]} not installed (installing needs root and apt-get): run 'sudo apt-get install ${missing[*]}'; the tests that need them skip"
fi
