#!/bin/bash
set -euo pipefail
printf 'def greet():\n    return "hello"\n' > /app/greet.py
