# Thirteenth session, run 8: the checks on the final code (the layouts fast path and the
# validation of malformed parts came after run 2), host time with the new-objects column
PART=checks bash tools/h200_final.sh
