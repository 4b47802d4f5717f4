#!/bin/bash
# The oracle: a temporary file in /tmp, as any script would make one.
set -euo pipefail
scratch=$(mktemp)
echo scratch > "$scratch"
cp "$scratch" note.txt
