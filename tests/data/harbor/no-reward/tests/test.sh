#!/bin/bash
# A broken verifier: it checks, then never writes /logs/verifier/reward.txt.
test -f done.txt && echo "done.txt is there"
