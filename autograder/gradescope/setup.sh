#!/usr/bin/env bash
# Gradescope runs this once when building the autograder image (Ubuntu, as root).
set -euxo pipefail
apt-get update
apt-get install -y --no-install-recommends python3 python3-venv python3-dev build-essential curl make git bubblewrap
curl -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal
source "$HOME/.cargo/env"
cd /autograder/source
make build notebooks-deps
.venv/bin/python -m autograder selfcheck
