#!/bin/bash
set -euo pipefail
cd /app
printf 'def greet(name):\n    return f"hello, {name}"\n' > greet.py
python3 -c 'import greet; print("\n".join(greet.greet(n) for n in open("names.txt").read().split()))' > greetings.txt
