"""The harness behind eval.py, one concern a module; each imports only those above it:

    text       plain-text formatting: sizes, durations, rates, tables, one-line messages
    specs      spec lines and spec files: parse, validate, task.yml's cases, seeds
    progress   a long case's progress lines, sent from the worker to the parent
    timing     the leaderboard's timing loop and its statistics
    ceilings   FLOPs and bytes, the measured peak and bandwidth, the roofline, the B200
               speed of light, the CPU run's time estimate
    memory     the memory a case needs and the memory free where it runs
    runs       what each mode does with one case, in the worker process
    worker     the spawned worker process, its time limits, the checks before a case
    baselines  torch baselines timed like the submission
    report     case labels, tables, the Markdown report and chart, JSON and output paths
    human      human mode: cases run with their progress, tables printed as they finish

eval.py at the repository root is the entry point: its arguments, the modes and the
POPCORN_FD protocol's output. The repository root (reference.py, utils.py, submission.py)
must be on sys.path, as it is for eval.py, the tests and the tools. The package is not in
the nvfp4_gemm wheel (pyproject.toml); the leaderboard runs its own eval.py.
"""

EXIT_FAIL = 112  # a case failed
EXIT_BAD_SPEC_FILE = 113  # a spec file that cannot be read or holds no case, a bad spec line
EXIT_USAGE = 2  # a wrong command line, environment variable or output path
EXIT_INTERRUPTED = 130  # Ctrl-C, as a shell reports a process ended by SIGINT
