# Fourteenth session, run 2: the epilogue's parts (timeline with store_tile points)
python3 tools/sm90_trace.py timeline --out $OUT/timeline.pt 2>&1 | tee $OUT/timeline.log
