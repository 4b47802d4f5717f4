#!/bin/bash
# Shared by every step's verifier: write Harbor's reward.json from two numbers.
write_reward() {
  printf '{"reward": %s, "style": %s}\n' "$1" "$2" > /logs/verifier/reward.json
}
