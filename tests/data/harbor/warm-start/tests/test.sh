#!/bin/bash
cd /srv
if [ "$(cat state.txt 2>/dev/null)" = "warm" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
