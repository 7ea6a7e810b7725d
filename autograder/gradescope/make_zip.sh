#!/usr/bin/env bash
# Builds autograder.zip for Gradescope ("Zip file upload"): setup.sh and run_autograder at the top
# level beside the instructors' repository: its tracked files only (git ls-files, private parts
# included), as they are in the work tree; untracked files (scratch work, a student's submission
# unpacked for a look, build output) never go in, ignored or not. Gradescope unpacks the zip into
# /autograder/source, so that is the repository root there.
# Usage: autograder/gradescope/make_zip.sh [OUT.zip]
set -euo pipefail
out="$(realpath -m "${1:-autograder.zip}")"
root="$(git rev-parse --show-toplevel)"
stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
cp "$root/autograder/gradescope/setup.sh" "$root/autograder/gradescope/run_autograder" "$stage/"
git -C "$root" ls-files -z --cached | (cd "$root" && xargs -0 cp --parents -t "$stage")
rm -f "$out"
(cd "$stage" && zip -qr "$out" .)
echo "wrote $out"
