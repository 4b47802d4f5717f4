#!/bin/bash
# Harbor verifier writing several metrics to reward.json; `reward` is their mean.
installed=0
configured=0
if [ "$(tally a b c 2>/dev/null)" = "3 items" ]; then installed=1; fi
if grep -qx 'unit=items' /etc/tally.conf 2>/dev/null; then configured=1; fi
python3 - "$installed" "$configured" <<'PY'
import json, sys
installed, configured = (int(x) for x in sys.argv[1:])
json.dump(
    {"reward": (installed + configured) / 2, "installed": installed, "configured": configured},
    open("/logs/verifier/reward.json", "w"),
)
PY
