# Thirteenth session, run 2: the checks on the session's code (full GPU suite with the new
# tests, eval.py test, racecheck and memcheck on the 7 sanitizer cases, host time with the
# new-sizes figure)
PART=checks bash tools/h200_final.sh
