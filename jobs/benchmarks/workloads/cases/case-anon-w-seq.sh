#!/bin/sh
# each of nr_task processes writes its own anonymous mapping sequentially

$USEMEM -n $nr_task $((mem / nr_task / 2))
