#!/bin/bash
if [ -e /tmp/warm ]; then echo warm > /srv/state.txt; else echo cold > /srv/state.txt; fi
