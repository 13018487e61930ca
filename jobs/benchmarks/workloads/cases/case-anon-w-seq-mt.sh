#!/bin/sh
# each of nr_task threads of one process writes its own anonymous mapping sequentially

$USEMEM -t $nr_task $((mem / nr_task / 2))
