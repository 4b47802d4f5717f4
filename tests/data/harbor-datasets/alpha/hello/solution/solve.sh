#!/bin/bash
echo alpha > greeting.txt
