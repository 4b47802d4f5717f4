#!/bin/bash
if [ "$(cat greeting.txt 2>/dev/null)" = "beta" ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
