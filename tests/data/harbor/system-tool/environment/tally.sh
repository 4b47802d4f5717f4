#!/bin/sh
unit=$(sed -n 's/^unit=//p' /etc/tally.conf)
echo "$# $unit"
