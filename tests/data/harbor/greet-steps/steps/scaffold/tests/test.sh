#!/bin/bash
# Step 1's verifier: greet.py imports and greet() says hello.
cd /app
if python3 -c 'import greet, sys; sys.exit(greet.greet() != "hello")'; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
