#!/bin/bash
if [ "$(cat greeting.txt 2>/dev/null)" = "alpha" ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
