#!/bin/bash
# The oracle: the answer, the package in python3's site-packages, the command on PATH.
set -euo pipefail
python3 - <<'PY'
import csv
with open("/app/numbers.csv", newline="") as handle:
    total = sum(int(row["amount"]) for row in csv.DictReader(handle))
open("/app/answer.txt", "w").write(f"{total}\n")
PY
site=$(python3 -c 'import site; print(site.getsitepackages()[0])')
mkdir -p "$site"
cp -r /app/vendor/helperpkg "$site/"
install -m 755 /app/vendor/helper-cli /usr/local/bin/helper-cli
