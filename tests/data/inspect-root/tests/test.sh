#!/bin/bash
# A separate verifier: its own image holds /tests; the agent's artifacts arrive at their paths.
echo "verifier: $(id -un) in $(pwd)"
ls /app 2>&1 | sed 's/^/app: /'
if [ -f /logs/artifacts/summary.txt ]; then echo "summary: $(cat /logs/artifacts/summary.txt)"; fi
if [ ! -L /app/out.txt ] && [ "$(cat /app/out.txt 2>/dev/null)" = "$(cat /tests/expected.txt)" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
