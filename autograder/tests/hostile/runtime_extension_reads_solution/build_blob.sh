#!/usr/bin/env bash
# Rebuilds the base64 blob in a1_ledger/ledger.py from slurp.c (needs gcc and Python's headers):
#   autograder/tests/hostile/runtime_extension_reads_solution/build_blob.sh [python]
set -euo pipefail
cd "$(dirname "$0")"
PY=${1:-python3}
INC=$("$PY" -c "import sysconfig; print(sysconfig.get_paths()['include'])")
gcc -shared -fPIC -Os -s -I"$INC" -o /tmp/slurp.abi3.so slurp.c
"$PY" - <<'PYEOF'
import base64, pathlib, re, textwrap
blob = base64.b64encode(pathlib.Path("/tmp/slurp.abi3.so").read_bytes()).decode()
src = pathlib.Path("a1_ledger/ledger.py")
text = src.read_text()
lines = "\n".join(textwrap.wrap(blob, 96))
text = re.sub(r'_BLOB = """[^"]*"""', f'_BLOB = """\n{lines}\n"""', text)
src.write_text(text)
PYEOF
