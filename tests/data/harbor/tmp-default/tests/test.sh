#!/bin/bash
# Harbor verifier: it needs /tmp too (mktemp), as the image made it (root, mode 1777).
log=$(mktemp) || { echo "mktemp failed as $(id -un)"; echo 0 > /logs/verifier/reward.txt; exit 0; }
stat -c '%U %a' /tmp > "$log"
if [ "$(cat "$log")" = "root 1777" ] && [ "$(cat note.txt 2>/dev/null)" = "scratch" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo "/tmp: $(cat "$log"); note.txt: $(cat note.txt 2>&1)"
  echo 0 > /logs/verifier/reward.txt
fi
