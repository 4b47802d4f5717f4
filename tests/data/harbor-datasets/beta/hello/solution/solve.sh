#!/bin/bash
echo beta > greeting.txt
