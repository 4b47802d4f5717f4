#!/bin/bash
# Step 2's verifier: the shared helper from tests/, the step's env, two metrics.
source /tests/reward.sh
cd /app
style=0
grep -q '^def greet(name' greet.py && style=1
expected=$(printf '%s, ada\n%s, grace\n' "$GREETING" "$GREETING")
if [ "$(cat greetings.txt 2>/dev/null)" = "$expected" ] && grep -q "setup ran" setup.log; then
  write_reward 1 "$style"
else
  write_reward 0 "$style"
fi
