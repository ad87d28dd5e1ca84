# Fourteenth session, run 1: what a CTA's later tiles cost beyond their K-tiles
# (timeline transitions, and the intercepts at 1 and 3 tiles per CTA)
set -x
python3 tools/sm90_trace.py timeline --out $OUT/timeline.pt 2>&1 | tee $OUT/timeline.log
python3 tools/sm90_ktile_cost.py --tile-n 128,256 --widths 128,64 --k 1024,2048 --tiles-per-cta 1,3 2>&1 | tee $OUT/tiles.log
