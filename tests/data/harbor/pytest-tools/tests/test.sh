#!/bin/bash
# Harbor verifier: pytest under a time limit, its output kept beside the reward.
cd /app
timeout 100 python3 -m pytest -q -p no:cacheprovider /tests/test_outputs.py -rA 2>&1 \
  | tee /logs/verifier/pytest.log
if [ "${PIPESTATUS[0]}" -eq 0 ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
