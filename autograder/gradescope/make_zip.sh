#!/usr/bin/env bash
# Builds autograder.zip for Gradescope ("Zip file upload"): setup.sh and run_autograder at the top
# level beside the instructors' repository: its tracked files only (git ls-files, private parts
# included), as they are in the work tree; untracked files (scratch work, a student's submission
# unpacked for a look, build output) never go in, ignored or not. Gradescope unpacks the zip into
# /autograder/source, so that is the repository root there.
# The grading secret goes in too, as `grading.grading-secret` (run_autograder moves it out of the
# course copy): every submission, and every regrade, is then seeded from the same secret. It is
# $SERVELAB_GRADING_SECRET_FILE when set, else OUT.zip.grading-secret beside the zip (made once,
# random, mode 0600, and reused by the next zip, so that rebuilding the zip keeps the inputs).
# Usage: autograder/gradescope/make_zip.sh [OUT.zip]
set -euo pipefail
out="$(realpath -m "${1:-autograder.zip}")"
root="$(git rev-parse --show-toplevel)"
secret="${SERVELAB_GRADING_SECRET_FILE:-$out.grading-secret}"
if [ -z "${SERVELAB_GRADING_SECRET_FILE:-}" ] && [ ! -s "$secret" ]; then
    (umask 077 && od -An -N32 -tx1 /dev/urandom | tr -d ' \n' > "$secret" && echo >> "$secret")
    echo "made a grading secret: $secret (keep it: grade --secret-file $secret regrades the same way)"
fi
[ -s "$secret" ] || { echo "make_zip.sh: grading secret file '$secret' is missing or empty" >&2; exit 2; }
stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
cp "$root/autograder/gradescope/setup.sh" "$root/autograder/gradescope/run_autograder" "$stage/"
install -m 600 "$secret" "$stage/grading.grading-secret"
git -C "$root" ls-files -z --cached | (cd "$root" && xargs -0 cp --parents -t "$stage")
rm -f "$out"
(cd "$stage" && zip -qr "$out" .)
echo "wrote $out"
